"""Every copy of one artifact's card, read in one place: the sidecar ``.card.json``, the copy embedded in an ONNX
model, the ``.card.md`` people read, and a Hugging Face README beside it. No torch.

The rule: each copy is either the one checked JSON card or rendered from it. ``CardCopies.problems`` says which copy
is not (the audit fails the model), ``the_card`` refuses copies that disagree, and ``rewrite`` writes them all again
from one card (signing). ``read_card`` is the one way a command gets "the card of this path".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from dpconvert.errors import DpconvertError

from .card import CARD_SUFFIX_JSON, PrivacyCard, card_paths

MODEL_SUFFIXES = (".onnx", ".pt", ".pt2", ".safetensors")
DATA_SUFFIXES = (".npz",)
README = "README.md"


def artifact_of(path: Path) -> Path:
    """The model or data file a path names: itself, or the file a ``*.card.json`` / ``*.card.md`` sits beside."""
    for suffix in (CARD_SUFFIX_JSON, ".card.md"):
        if path.name.endswith(suffix):
            return path.with_name(path.name[: -len(suffix)])
    return path


@dataclass
class CardCopies:
    artifact: Path
    cards: dict = field(default_factory=dict)  # copy name → PrivacyCard ("sidecar", "embedded", "README.md")
    markdown: Optional[str] = None  # the .card.md text, if the file exists
    readme_text: Optional[str] = None  # README.md beside the artifact when it holds this artifact's card
    readme_claim: Optional[str] = None  # a README whose front matter claims dpconvert's tags but holds no card for this artifact
    proto: object = None  # the loaded ONNX model, if the artifact is one

    @property
    def is_data(self) -> bool:
        return self.artifact.suffix.lower() in DATA_SUFFIXES

    def the_card(self) -> PrivacyCard:
        if not self.cards:
            raise DpconvertError(f"{self.artifact}: no privacy card (no {self.artifact.name}{CARD_SUFFIX_JSON}"
                                 + (", none embedded" if self.proto is not None else "") + ")")
        card = next(iter(self.cards.values()))
        if any(c.data != card.data for c in self.cards.values()):
            raise DpconvertError(f"{self.artifact}: its card copies ({', '.join(self.cards)}) differ: one was edited after dpconvert wrote "
                                 "it", fix="delete the edited copy (or convert again), then sign")
        return card

    def artifact_sha256(self) -> Optional[str]:
        """The hash a card binds, computed from the file: over the ONNX graph, or over the file's bytes."""
        from .onnx_meta import model_sha256

        if self.proto is not None:
            return model_sha256(self.proto)
        if self.artifact.is_file():
            from dpconvert.io.hashing import file_sha256

            return file_sha256(self.artifact)
        return None

    def problems(self, card: PrivacyCard) -> list[tuple[str, bool, str]]:
        """(check, ok, detail) for every copy a person or a tool reads, against the checked ``card``."""
        from .hf import readme_problem
        from .markdown import render_markdown

        out = []
        if len(self.cards) > 1:
            agree = all(c.data == card.data for c in self.cards.values())
            out.append(("copies agree", agree, "" if agree else f"the copies ({', '.join(self.cards)}) differ: one was edited after dpconvert "
                        "wrote it; delete the edited copy or convert again"))
        if self.markdown is not None:
            ok = self.markdown == render_markdown(card)
            out.append((".card.md matches", ok, "" if ok else f"{card_paths(self.artifact)[1].name} differs from the Markdown rendered "
                        "from the card (edited, or written for another card); delete it, then `dpconvert card sign` writes it again from the "
                        "card"))
        if self.readme_text is not None:
            problem = readme_problem(self.readme_text, card)
            out.append(("README.md matches", problem is None, problem or ""))
        if self.readme_claim is not None:
            out.append(("README.md matches", False, self.readme_claim))
        return out

    def rewrite(self, card: PrivacyCard) -> None:
        """Write every copy again from ``card``, all or nothing."""
        from dpconvert.io.atomic import AtomicOutputs

        from .hf import _LICENSE_LINE, render_hf_model_card
        from .markdown import render_markdown
        from .onnx_meta import embed_card

        json_path, md_path = card_paths(self.artifact)
        with AtomicOutputs() as out:
            if self.proto is not None:
                embed_card(self.proto, card)
                out.write(self.artifact, self.proto.SerializeToString())
            out.write(json_path, card.to_json())
            if self.proto is not None or self.markdown is not None:
                out.write(md_path, render_markdown(card))
            if self.readme_text is not None:
                import json

                found = _LICENSE_LINE.search(self.readme_text)
                out.write(self.artifact.parent / README, render_hf_model_card(card, license=json.loads(found.group(1)) if found else "other"))


def read_card_copies(path: str | Path) -> CardCopies:
    """Read every copy of the card of PATH (a model, a data set, or one of their cards). Unreadable or malformed
    copies raise ``DpconvertError`` naming the copy and the field."""
    from .hf import card_from_model_card, claims_dpconvert
    from .onnx_meta import extract_card, load_onnx

    artifact = artifact_of(Path(path))
    copies = CardCopies(artifact)
    if artifact.suffix.lower() == ".onnx" and artifact.is_file():
        copies.proto = load_onnx(str(artifact))
    json_path, md_path = card_paths(artifact)
    if json_path.is_file():
        copies.cards["sidecar"] = PrivacyCard.read(json_path)
    if copies.proto is not None:
        embedded = extract_card(copies.proto, artifact.name)
        if embedded is not None:
            copies.cards["embedded"] = embedded
    if md_path.is_file():
        copies.markdown = _read_text(md_path)
    readme = artifact.parent / README
    if readme.is_file():
        text = _read_text(readme)
        card = card_from_model_card(text, str(readme))
        if card is not None and _names(card, artifact):
            copies.cards[README] = card
            copies.readme_text = text
        elif card is None and claims_dpconvert(text) and not copies.is_data:
            copies.readme_claim = ("its front matter carries dpconvert's privacy tags but it holds no privacy card; write it with "
                                   "`dpconvert card export` or remove the tags")
        elif card is not None and not (artifact.parent / card.artifact["file"]).exists():
            copies.readme_claim = f"it holds the card of {card.artifact['file']!r}, which is not in this folder"
    return copies


def _names(card: PrivacyCard, artifact: Path) -> bool:
    """A README's card is this artifact's when it names this file, or when the folder holds no other model."""
    if card.artifact.get("file") == artifact.name:
        return True
    others = [f for f in artifact.parent.iterdir() if f.suffix.lower() in MODEL_SUFFIXES + DATA_SUFFIXES and f != artifact]
    return not others


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise DpconvertError(f"{path}: cannot read it ({e.strerror})") from None


def read_card(path: str | Path) -> PrivacyCard:
    """The one card of PATH: an ONNX model (embedded or sidecar), a data set (.npz), a *.card.json, or a Hub README.md."""
    p = Path(path)
    if p.name == README and p.is_file():
        from .hf import card_from_model_card

        card = card_from_model_card(_read_text(p), str(p))
        if card is None:
            raise DpconvertError(f"{p}: holds no dpconvert privacy card", fix="write one with `dpconvert card export`")
        return card
    if p.name.endswith(CARD_SUFFIX_JSON):
        return PrivacyCard.read(p)
    if not p.exists():
        raise DpconvertError(f"{p}: no such file")
    if p.suffix.lower() not in MODEL_SUFFIXES + DATA_SUFFIXES:
        raise DpconvertError(f"{p}", fix=f"give a model ({', '.join(MODEL_SUFFIXES)}), a data set (.npz), a *{CARD_SUFFIX_JSON} card or a README.md")
    return read_card_copies(p).the_card()
