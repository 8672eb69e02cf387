"""The journeys' starting point holds: a published demo, and a copy of it, plan as up to date."""

from __future__ import annotations


def test_published_demo_plans_up_to_date(demo_published):
    plan, _ = demo_published.run_json("plan", str(demo_published.manifest))
    assert plan["summary"]["build"] == plan["summary"]["rebuild"] == plan["summary"]["regate"] == 0
    assert plan["summary"]["up_to_date"] == 18


def test_a_copy_is_its_own_store(published_copy, demo_published):
    plan, _ = published_copy.run_json("plan", str(published_copy.manifest))
    assert plan["summary"]["up_to_date"] == 18
    listing, _ = published_copy.run_json("ls", "--registry", str(published_copy.store))
    assert listing, "the copied store lists the published artifacts"
    assert str(demo_published.store) not in published_copy.manifest.read_text()
