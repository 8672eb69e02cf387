"""``core.query``'s helpers for saying what is published (issue 23.5), with literal records."""

from __future__ import annotations

from orchestrator.core.query import latest_version, matches_profile, published_values, versions_newest_first


def _meta(version: str, when: str, precision: str = "fp32", profile_set: str = "default",
          profiles: tuple[str, ...] = ("default",)) -> dict:
    return {"model": {"name": "m", "version": version}, "published_at": when, "precision": precision,
            "profile_set": profile_set, "profiles": list(profiles)}


def test_versions_newest_first_orders_by_first_publish_as_latest_does():
    metas = [_meta("2.0.0", "2026-01-03"), _meta("1.0.0", "2026-01-04"),  # an old version republished later
             _meta("1.0.0", "2026-01-01"), _meta("10.0.0", "2026-01-02")]
    assert versions_newest_first(metas) == ["2.0.0", "10.0.0", "1.0.0"]
    assert versions_newest_first(metas)[0] == latest_version(metas, "m")


def test_a_profile_matches_its_set_or_a_profile_in_it():
    meta = _meta("1", "t", profile_set="pair", profiles=("small", "large"))
    assert matches_profile(meta, "pair") and matches_profile(meta, "large")
    assert not matches_profile(meta, "default")


def test_published_values_are_sorted_and_distinct():
    values = published_values([_meta("1", "t", "fp32"), _meta("1", "t", "fp16", "big"), _meta("1", "t", "fp16")])
    assert values.precisions == ("fp16", "fp32") and values.profile_sets == ("big", "default")
