"""Named, versioned strategies: a name for a ``Features`` config, so a run says which strategy it measured.

Built-in names cover what ragkit teaches — ``plain``, ``hyde``, ``rerank``, ``grading``, ``self_correction``
(the hallucination check and the correction loop), ``decompose``, ``full`` (``Features.all_on()``),
``dense_only``, ``sparse_only`` … (:data:`BUILTIN`). ``ragkit strategies add NAME features.yaml`` keeps
the user's own as ``NAME.vN.yaml`` in the strategies folder (``$RAGKIT_STRATEGIES``, else
``~/.local/share/ragkit/strategies``): adding a name again makes a new version and never overwrites
one a past run measured. ``NAME`` means its latest version, ``NAME@2`` the second.

Usage::

    resolve("grading")                 # Strategy(name="grading", version="builtin", features=Features(grading=True))
    add("mine", "features.yaml")       # -> Strategy(name="mine", version="1", …)
    resolve("mine@1").features
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ragkit.pipeline.features import Features

BUILTIN: dict[str, Features] = {
    "plain": Features(),
    "hyde": Features(hyde=True),
    "rerank": Features(rerank=True),
    "grading": Features(grading=True),
    "self_correction": Features(hallucination_check=True, self_correction=True, judge_spans=True),
    "routing": Features(routing=True),
    "decompose": Features(decompose=True),
    "multi_hop": Features(multi_hop=True),
    "full": Features.all_on(),
    "dense_only": Features(retrieval_mode="dense"),
    "sparse_only": Features(retrieval_mode="sparse"),
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Strategy:
    name: str
    version: str  # "builtin", or the user's version number
    features: Features

    @property
    def label(self) -> str:
        return self.name if self.version == "builtin" else f"{self.name}@{self.version}"


def run_label(name: str, version: str) -> str:
    """How a strategy's runs are labelled in reports: its name, with ``@N`` only for a stored version
    (a built-in strategy or a Features file goes by its name)."""
    return name if version in ("builtin", "file") else f"{name}@{version}"


def folder() -> Path:
    return Path(os.environ.get("RAGKIT_STRATEGIES") or Path.home() / ".local" / "share" / "ragkit" / "strategies")


def _versions(name: str) -> list[int]:
    return sorted(int(m.group(1)) for p in folder().glob(f"{name}.v*.yaml") if (m := re.fullmatch(rf"{re.escape(name)}\.v(\d+)\.yaml", p.name)))


def add(name: str, features_yaml: str | Path) -> Strategy:
    """Store ``features_yaml`` (checked: it must load as ``Features``) as the next version of ``name``."""
    if not _NAME.match(name) or name in BUILTIN:
        raise ValueError(f"a strategy name is letters, digits, '_', '-' or '.' (not a built-in one: {sorted(BUILTIN)}); got {name!r}")
    features = Features.from_yaml(features_yaml)
    text = Path(features_yaml).read_text(encoding="utf-8")
    version = (_versions(name) or [0])[-1] + 1
    folder().mkdir(parents=True, exist_ok=True)
    target = folder() / f"{name}.v{version}.yaml"
    with open(target, "x", encoding="utf-8") as fh:  # "x": another writer's version is never overwritten
        fh.write(text)
    return Strategy(name, str(version), features)


def resolve(spec: str | Path) -> Strategy:
    """A built-in name, a stored ``NAME`` or ``NAME@N``, or a path to a Features YAML file."""
    spec = str(spec)
    if spec in BUILTIN:
        return Strategy(spec, "builtin", BUILTIN[spec])
    name, _, wanted = spec.partition("@")
    versions = _versions(name) if _NAME.match(name) else []
    if versions:
        version = int(wanted) if wanted.isdigit() else versions[-1]
        if version not in versions:
            raise ValueError(f"strategy {name!r} has versions {versions}, not {wanted}")
        return Strategy(name, str(version), Features.from_yaml(folder() / f"{name}.v{version}.yaml"))
    if Path(spec).is_file():
        return Strategy(Path(spec).stem, "file", Features.from_yaml(spec))
    known = sorted(BUILTIN) + sorted({p.name.split(".v")[0] for p in folder().glob("*.v*.yaml")})
    raise ValueError(f"no strategy {spec!r}: the known ones are {', '.join(known)} (or give a Features YAML file)")


def available() -> list[Strategy]:
    stored = sorted({p.name.split(".v")[0] for p in folder().glob("*.v*.yaml")})
    return [Strategy(n, "builtin", f) for n, f in BUILTIN.items()] + [resolve(n) for n in stored]
