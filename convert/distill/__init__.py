"""DPDFD's post-processing: choosing queries, training the student and the generator from released rows.

Nothing here calls the teacher or draws DP noise; the engine (``mechanisms/dpdfd.py``) owns the release and hands
these parts only released (noisy) rows and public or data-independent inputs (tests/test_architecture.py checks it).
"""
