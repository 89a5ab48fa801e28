"""Several teachers distilled into one student (DPDFD's multi-teacher extension).

``dpconvert t1.pt t2.pt … --eps 1``, a folder of teacher files, or a list file (``teachers.txt``: one path a line,
relative to the list file) name the teachers. They must agree on what they take and what they answer (input spec,
classes, normalisation). The DPDFD release averages their normalised output-gradient rows
(``NormalisedGaussianRelease.mean_of_normalised``); with ``--disjoint-partitions`` (the user's statement that each was
trained on its own disjoint part of the private data) that gives a record-level bound. Everything else — checks,
evaluation, the operator's agreement figure — sees the set as one teacher answering the mean of the members' logits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from dpconvert.errors import DpconvertError

from .teachers import LoadOptions, Teacher, load_teacher

TEACHER_SUFFIXES = (".pt", ".pth", ".pt2", ".safetensors", ".onnx")
LIST_SUFFIX = ".txt"


def expand_teacher_sources(sources: Union[str, Sequence[str]]) -> list[str]:
    """The teacher sources named: each folder replaced by its teacher files (sorted by name), each ``.txt`` list file by
    its non-empty, non-comment lines (relative paths are relative to the list file)."""
    out: list[str] = []
    for source in [sources] if isinstance(sources, str) else list(sources):
        p = Path(source)
        if p.is_dir():
            files = sorted(str(f) for f in p.iterdir() if f.suffix.lower() in TEACHER_SUFFIXES and f.is_file())
            if not files:
                raise DpconvertError(f"{source}: the folder holds no teacher file ({', '.join(TEACHER_SUFFIXES)})", fix="give teacher files")
            out += files
        elif p.suffix.lower() == LIST_SUFFIX and p.is_file():
            lines = [ln.strip() for ln in p.read_text().splitlines()]
            listed = [str(p.parent / ln) if not Path(ln).is_absolute() else ln for ln in lines if ln and not ln.startswith("#")]
            if not listed:
                raise DpconvertError(f"{source}: the list file names no teacher", fix="write one teacher path a line")
            out += listed
        else:
            out.append(str(source))
    if not out:
        raise DpconvertError("no teacher given", fix="give a teacher file, timm:NAME or builtin:digits")
    if len(set(out)) != len(out):
        twice = sorted({s for s in out if out.count(s) > 1})
        raise DpconvertError(f"teacher {twice[0]} is named twice", fix="name each teacher once")
    return out


@dataclass
class TeacherSet(Teacher):
    """n loaded teachers with one input spec. Called as one teacher it answers the mean of the members' logits (checks,
    evaluation, the operator's display); the DPDFD engine calls each member (``members``) and averages their rows."""

    members: list[Teacher] = field(default_factory=list)

    def member_block(self) -> list[dict]:
        """The card's ``teacher.members``: each teacher's source and hash, in the order the rows average them."""
        return [{"source": m.source, "kind": m.kind, "sha256": m.sha256, "weights_sha256": m.weights_sha256, "architecture": m.arch}
                for m in self.members]


def load_teachers(sources: Union[str, Sequence[str]], options: Optional[LoadOptions] = None) -> Teacher:
    """One teacher (as ``load_teacher``), or a ``TeacherSet`` when several are named."""
    names = expand_teacher_sources(sources)
    if len(names) == 1:
        return load_teacher(names[0], options)
    members = [load_teacher(name, options) for name in names]
    seen: dict = {}
    for m in members:  # one model twice would be one partition's teacher counted twice (its records would move 2 of n)
        for key, what in ((m.sha256, "file sha256"), (m.weights_sha256, "weights sha256")):  # the weights: a re-saved copy too
            if key is not None and key in seen:
                raise DpconvertError(f"{m.source} and {seen[key]} are the same model ({what} {key[:12]}…)", fix="give each teacher once")
            if key is not None:
                seen[key] = m.source
    first = members[0]
    for m in members[1:]:
        if (m.spec.shape, m.spec.num_classes) != (first.spec.shape, first.spec.num_classes):
            raise DpconvertError(f"{m.source} takes {list(m.spec.shape)} and answers {m.spec.num_classes} classes, but {first.source} "
                                 f"takes {list(first.spec.shape)} with {first.spec.num_classes}", fix="give teachers of one task")
        if (m.spec.mean, m.spec.std) != (first.spec.mean, first.spec.std):
            raise DpconvertError(f"{m.source} normalises its input differently from {first.source}",
                                 fix="give teachers trained with one normalisation (or set `mean`/`std` for all)", param="mean")

    def mean_logits(x):
        total = None
        for m in members:
            y = m(x).float()
            total = y if total is None else total + y
        return total / len(members)

    digest = hashlib.sha256("\n".join(str(m.sha256) for m in members).encode()).hexdigest()
    weights = hashlib.sha256("\n".join(str(m.weights_sha256) for m in members).encode()).hexdigest()
    warnings = sorted({w for m in members for w in m.warnings})
    return TeacherSet(forward=mean_logits, spec=first.spec, kind="ensemble",
                      source=f"{len(names)} teachers: {names[0]} … {names[-1]}" if len(names) > 2 else " and ".join(names),
                      description=f"{len(members)} teachers ({first.description}, …)", sha256=digest,
                      arch=f"{len(members)} × {first.arch}", num_params=sum(m.num_params or 0 for m in members) or None,
                      warnings=warnings, members=members, weights_sha256=weights)
