"""The evaluations list in-process: tags and descriptions shown and filterable, and every
column sorting the whole list, not just the page on screen."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest

from tests.web.conftest import Web


@pytest.fixture(scope="module")
def alice(module_web: Web) -> str:
    """Five evaluations of alice's, created in the order listed, once for the module (its
    tests only read them); her key."""
    web = module_web
    key = web.api.key("alice-key", user="alice", team="blue")
    runs = [
        ("gsm8k-baseline", "m-b", ["math", "baseline"], "The baseline on grade-school math.", 0.5),
        ("gsm8k-tuned", "m-a", ["math"], "After fine-tuning; see the <b>notes</b>.", 0.9),
        ("humaneval-try", "m-c", ["code"], None, 0.1),
        ("Alphabet", "m-d", [], "Sorting names " + "and more " * 30, None),
        ("zebra", None, ["math_extra"], None, 0.7),
    ]
    for name, model, tags, description, reward in runs:
        fields = {"tags": tags, "description": description, "model_name": model}
        eid = web.api.create(key, name=name, **{k: v for k, v in fields.items() if v is not None})
        if reward is not None:
            sample = {"sample_id": "s", "example_id": 0, "rollout_number": 1, "reward": reward}
            assert web.api.post(f"/evaluations/{eid}/samples", key, json={"samples": [sample]})
    return key


@pytest.fixture
def web(module_web: Web, alice: str) -> Iterator[Web]:
    """The module's app, alice signed in."""
    module_web.client.cookies.clear()
    module_web.login(alice)
    yield module_web
    module_web.client.cookies.clear()


def _names(web: Web, query: str) -> list[str]:
    response = web.client.get(f"/evaluations?{query}&format=json")
    assert response.status_code == 200, response.text
    return [row["name"] for row in response.json()["evaluations"]]


def test_tags_and_descriptions_are_shown_and_filter_the_list(web: Web) -> None:
    page = web.client.get("/evaluations")
    text = page.text
    assert '<a class="tag" href="/evaluations?tag=baseline"' in text
    assert "The baseline on grade-school math." in text
    assert "see the &lt;b&gt;notes&lt;/b&gt;" in text  # a description is text, not markup
    long = html.unescape(text.split("Sorting names")[-1].split("</p>")[0])
    assert len(long) < 170 and long.endswith("…")  # cut, whole in its title
    assert _names(web, "tag=math") == ["gsm8k-tuned", "gsm8k-baseline"]  # not math_extra
    assert _names(web, "tag=math_") == []  # a tag is matched whole, its _ is no wildcard
    assert _names(web, "q=FINE-TUNING") == ["gsm8k-tuned"]  # description, any case
    assert _names(web, "q=gsm8k") == ["gsm8k-tuned", "gsm8k-baseline"]  # name
    assert _names(web, "q=%25") == []  # % is text, not a wildcard
    assert _names(web, "tag=math&q=baseline") == ["gsm8k-baseline"]
    twin = web.client.get("/evaluations?format=json").json()
    row = next(r for r in twin["evaluations"] if r["name"] == "gsm8k-baseline")
    assert row["tags"] == ["math", "baseline"]
    assert row["description"] == "The baseline on grade-school math."


@pytest.mark.parametrize(
    ("sort", "names"),
    [
        ("name", ["Alphabet", "gsm8k-baseline", "gsm8k-tuned", "humaneval-try", "zebra"]),
        ("-name", ["zebra", "humaneval-try", "gsm8k-tuned", "gsm8k-baseline", "Alphabet"]),
        ("model", ["gsm8k-tuned", "gsm8k-baseline", "humaneval-try", "Alphabet", "zebra"]),
        ("-model", ["Alphabet", "humaneval-try", "gsm8k-baseline", "gsm8k-tuned", "zebra"]),
        ("-mean", ["gsm8k-tuned", "zebra", "gsm8k-baseline", "humaneval-try", "Alphabet"]),
        ("mean", ["humaneval-try", "gsm8k-baseline", "zebra", "gsm8k-tuned", "Alphabet"]),
        ("samples", ["Alphabet", "zebra", "humaneval-try", "gsm8k-tuned", "gsm8k-baseline"]),
        ("created", ["gsm8k-baseline", "gsm8k-tuned", "humaneval-try", "Alphabet", "zebra"]),
    ],
)
def test_every_column_sorts_the_whole_list_across_pages(
    web: Web, sort: str, names: list[str]
) -> None:
    # Two per page: the order runs on over the pages, so it is the whole list's.
    pages = [_names(web, f"sort={sort}&limit=2&skip={skip}") for skip in (0, 2, 4)]
    assert [name for page in pages for name in page] == names


def test_the_sorted_column_is_marked_and_its_link_reverses_it(web: Web) -> None:
    text = html.unescape(web.client.get("/evaluations?sort=-mean&tag=math").text)
    assert 'aria-sort="descending"><a href="/evaluations?sort=mean&tag=math">Mean reward' in text
    assert '<a href="/evaluations?sort=name&tag=math">Name</a>' in text
    assert '<input type="hidden" name="sort" value="-mean">' in text  # filtering keeps it
    bad = web.client.get("/evaluations?sort=colour")
    assert bad.status_code == 400 and "Unknown sort" in bad.text
