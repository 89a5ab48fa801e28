"""The private training data as a handle: methods hold it and hand it to a mechanism; only the privacy kernel
(``convert/mechanisms/``) opens it (tests/test_architecture.py). Each record is read and preprocessed on its own
(``io/data.py``: no statistic over the set is computed), labelled."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PrivateRecords:
    path: str
    spec: object  # the teacher's InputSpec: records are read at its size and normalisation
    data_format: dict = field(default_factory=dict)  # pixel_range, class_names (RunOptions.data_format)

    def open_records(self):
        """The records as a ``LabelledData`` (x, y)."""
        from dpconvert.io.data import load_data
        from dpconvert.profiling import phase

        with phase("load data"):
            return load_data(self.path, self.spec, require_labels=True, **self.data_format)
