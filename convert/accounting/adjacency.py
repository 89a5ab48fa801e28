"""The adjacency relations dpconvert's guarantees are stated under (the card's ``guarantee.adjacency``)."""

ADJACENCY_QUERY = "add/remove one teacher answer (one row of one step's released B×K output-gradient matrix)"
ADJACENCY_RECORD = "add/remove one record of the private data set"
ADJACENCY_GENERATOR_PKNN = ("add/remove one teacher answer in the query generator's DPDFD run and add/remove one record of the "
                            "private data set (Private-kNN labels)")
ADJACENCY_RECORD_COMPOSED = "add/remove one record of the private data set (both the query generator's training and the labels)"
ADJACENCY_RECORD_DISJOINT = (
    "add/remove one record of the private data set, which was split into disjoint partitions with one teacher trained on "
    "each (stated by the user, `disjoint_partitions`; not checked by dpconvert): one teacher changes, and every released "
    "row, the mean of the teachers' normalised rows, moves by at most 2C/n")
ADJACENCY_QUERY_GAN_QUERIES = (
    "add/remove one teacher answer (one row of one step's released B×K output-gradient matrix); the queries come from a GAN "
    "with a DP critic trained on private records, whose record-level ε is guarantee.queries_record_level_epsilon")
