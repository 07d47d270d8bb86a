"""Hydra's override grammar as hypothesis strategies, for the properties of recipe.overrides (tests/test_overrides.py,
and tests/test_verl_config.py, which composes what they generate in verl's own config)."""

from __future__ import annotations

from hypothesis import strategies as st


def judged(*items: str):
    """The recipe's judgement of the items: (the leaves that passed, the problems)."""
    from recipe import grpo

    return grpo.judge(tuple(items), owned=grpo.owned_keys(), anchors=grpo.PATH_ANCHORS)


# A name of a key segment or a dict key (Hydra reads its bool/null/inf/nan words as values, not names).
NAME = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s not in ("true", "false", "null", "inf", "nan"))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                   st.floats(allow_nan=False, allow_infinity=True, width=32),
                   st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=12))
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(NAME, inner, min_size=1, max_size=3)),
                     max_leaves=6)


@st.composite
def overrides(draw, keys: st.SearchStrategy[str]) -> str:
    """One override of a key: dotted, or with its tail folded into a dict value (`a={b:{c:v}}`), op "", + or ++."""
    from recipe.overrides import render

    key = draw(keys).split(".")
    value = draw(VALUE)
    fold = draw(st.integers(1, len(key)))
    for part in reversed(key[fold:]):
        value = {part: value}
    op = draw(st.sampled_from(["", "+", "++"]))
    return f"{op}{'.'.join(key[:fold])}={render(value)}"


def tree_keys() -> list[str]:
    """Every key of verl's config tree (catalog/verl_config.json)."""
    from catalog import verl_config

    return sorted(verl_config.tree().keys)
