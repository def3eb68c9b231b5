"""Previous and next on a sample page follow the samples table the user came from: its sort
and filter travel in the sample's URL (with the row's place in the list), in-process."""

from __future__ import annotations

import html
import re

from tests.web.conftest import Web, tool_sample

ERROR = {"type": "ModelError", "message": "timed out"}


def _seed(web: Web) -> tuple[str, str]:
    key = web.api.key("nav-key", user="nina")
    eid = web.api.create(key, name="nav")
    # 23 samples, rewards all distinct and not in upload order; every 4th errored.
    samples = [tool_sample(i, 1, ((i * 7) % 23) / 23) for i in range(23)]
    for i in range(0, 23, 4):
        samples[i] = {**samples[i], "error": ERROR}
    posted = web.api.post(f"/evaluations/{eid}/samples", key, json={"samples": samples})
    assert posted.status_code == 200, posted.text
    web.login(key)
    return key, eid


def _links(web: Web, url: str) -> list[str]:
    """The sample links of a samples page, in the table's order."""
    page = web.client.get(url)
    assert page.status_code == 200, page.text
    found = re.findall(r'<td data-label="Sample"><a href="([^"]+)"', page.text)
    return [html.unescape(link) for link in found]


def _ids(links: list[str]) -> list[str]:
    return [re.search(r"id=([^&]+)", link).group(1) for link in links]  # type: ignore[union-attr]


def test_next_walks_the_sorted_filtered_list_across_its_pages(web: Web) -> None:
    _, eid = _seed(web)
    listing = f"/evaluations/{eid}/samples?sort=-reward&errored=no&limit=5"
    pages = [_links(web, f"{listing}&page={page}") for page in (1, 2, 3, 4)]
    table = [link for links in pages for link in links]
    assert len(table) == 17 and all("at=" in link and "sort=-reward" in link for link in table)
    # From the second page's first row: the neighbours are the table's, across its pages.
    nav = web.client.get(pages[1][0] + "&format=json").json()["nav"]
    assert nav["previous"]["sample_id"] == _ids(pages[0])[-1]
    assert nav["next"]["sample_id"] == _ids(pages[1])[1]
    assert nav["order"] == "reward, high first, without errors"
    assert nav["list_query"] == "sort=-reward&errored=no&limit=5&page=2"
    # Following "next" from the first row visits the whole list in the table's order.
    walked, link = [], table[0]
    while link:
        response = web.client.get(link)
        assert response.status_code == 200, response.text
        walked.append(re.search(r"<h1>Sample <code>([^<]+)</code>", response.text).group(1))  # type: ignore[union-attr]
        found = re.search(r'<a rel="next" href="([^"]+)"', response.text)
        link = html.unescape(found.group(1)) if found else ""
        assert len(walked) <= 17
    assert walked == _ids(table)
    rewards = [web.client.get(f"{t}&format=json").json()["sample"]["reward"] for t in table]
    assert rewards == sorted(rewards, reverse=True)
    # And "previous" from the last row walks it back.
    last = web.client.get(table[-1] + "&format=json").json()["nav"]
    assert last["next"] is None and last["previous"]["sample_id"] == _ids(table)[-2]


def test_errored_only_and_one_examples_lists_are_followed_too(web: Web) -> None:
    _, eid = _seed(web)
    errored = _links(web, f"/evaluations/{eid}/samples?errored=yes")
    assert _ids(errored) == [f"s-{i}-1" for i in range(0, 23, 4)]
    nav = web.client.get(errored[1] + "&format=json").json()["nav"]
    assert (nav["previous"]["sample_id"], nav["next"]["sample_id"]) == ("s-0-1", "s-8-1")
    assert nav["order"] == "upload order, errored only"


def test_a_live_list_that_moved_is_followed_and_a_lost_one_falls_back_to_upload_order(
    web: Web,
) -> None:
    key, eid = _seed(web)
    table = _links(web, f"/evaluations/{eid}/samples?sort=-reward")
    opened = table[3]
    # Two better samples arrive: the opened one is now two places further down.
    better = [tool_sample(100 + i, 1, 1.0 + i) for i in range(2)]
    posted = web.api.post(f"/evaluations/{eid}/samples", key, json={"samples": better})
    assert posted.status_code == 200, posted.text
    nav = web.client.get(opened + "&format=json").json()["nav"]
    assert nav["previous"]["sample_id"] == _ids(table)[2]
    assert nav["next"]["sample_id"] == _ids(table)[4]
    assert "at=4" in nav["previous_query"] and "at=6" in nav["next_query"]
    # A position far from the sample: upload order, and the page says so.
    lost = re.sub(r"at=\d+", "at=5000", opened)
    nav = web.client.get(lost + "&format=json").json()["nav"]
    assert nav["order"].startswith("upload order (the sample has left the list")
    example = int(_ids([opened])[0].split("-")[1])
    assert nav["next_query"] == "" and nav["next"]["sample_id"] == f"s-{example + 1}-1"
    refused = web.client.get(re.sub(r"at=\d+", "at=-1", opened))
    assert refused.status_code == 400 and "'at'" in html.unescape(refused.text)
