"""The public `prime` CLI 0.18.0, unmodified, fetching what was pushed to a proctor hub:
`prime env pull` and `prime env install` of a team's private environment (and refused to
another team), `prime eval list --env primeintellect/...`, and errors free of rich markup."""

from __future__ import annotations

import re
import sys
import tarfile
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.e2e.hosted_helpers import hub_project
from tests.e2e.test_hub import make_key, prime
from tests.support.platform import Platform, start_platform

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    plat = start_platform(tmp_path_factory.mktemp("pull-platform"))
    yield plat
    plat.process.stop()


def standalone_project(tmp_path: Path, name: str, version: str) -> Path:
    """The example package with no dependencies, so pip installs it with no network."""
    folder = hub_project(tmp_path, name=name, version=version)
    text = (folder / "pyproject.toml").read_text()
    (folder / "pyproject.toml").write_text(
        text.replace('dependencies = ["proctor"]', "dependencies = []")
    )
    return folder


def pip_shim(tmp_path: Path) -> Path:
    """A bin dir whose `pip` installs into a fresh, empty venv (not the test's own)."""
    target = tmp_path / "target-venv"
    bindir = tmp_path / "shim-bin"
    bindir.mkdir()
    venv.create(target, with_pip=False)
    shim = bindir / "pip"
    shim.write_text(
        f"#!/bin/sh\nexec {sys.executable} -m pip --python {target / 'bin' / 'python'} "
        '"$@" --no-index --no-deps\n'
    )
    shim.chmod(0o755)
    return bindir


def test_pull_and_install_a_team_private_environment_only_for_its_team(
    hub: Platform, tmp_path: Path
) -> None:
    carol = make_key(hub, "carol", team="lab")
    dave = make_key(hub, "dave", team="lab")
    eve = make_key(hub, "eve", team="other-lab")
    folder = standalone_project(tmp_path, "pull-echo", "0.3.0")
    pushed = prime(hub, carol, tmp_path / "h-carol", "env", "push", "--team", "lab", cwd=folder)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "lab/pull-echo" in pushed.stdout

    # A teammate pulls the source archive (the CLI sends its key; the URL is signed for it).
    work = tmp_path / "dave-work"
    work.mkdir()
    pulled = prime(hub, dave, tmp_path / "h-dave", "env", "pull", "lab/pull-echo", cwd=work)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    target = work / "pull_echo"
    assert (target / "pyproject.toml").read_text() == (folder / "pyproject.toml").read_text()
    assert (target / ".prime" / ".env-metadata.json").is_file()

    # ... and installs the wheel: pip gets the signed wheel URL, with no credentials of its own.
    details = hub.client(dave).get("/environmentshub/lab/pull-echo/@0.3.0").json()["data"]
    assert details["wheel_url"].split("?")[0].endswith(".whl")
    shim = pip_shim(tmp_path)
    installed = prime(
        hub,
        dave,
        tmp_path / "h-dave",
        "env",
        "install",
        "lab/pull-echo",
        "--with",
        "pip",
        cwd=work,
        path_prefix=shim,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = next((tmp_path / "target-venv").glob("lib/python*/site-packages"))
    assert list(site.glob("pull_echo-0.3.0.dist-info")), installed.stdout

    # Another team sees nothing: not the entry, not its files, not a teammate's URL.
    refused = prime(hub, eve, tmp_path / "h-eve", "env", "pull", "lab/pull-echo", cwd=work)
    assert refused.returncode != 0
    assert "No environment lab/pull-echo is visible to this key" in refused.stdout + refused.stderr
    with httpx.Client(timeout=30) as http:
        assert http.get(details["wheel_url"]).status_code == 200  # dave's, without a header
        forged = details["wheel_url"].replace("key=", "key=x")
        assert http.get(forged).status_code == 403
        assert http.get(details["package_url"].split("?")[0]).status_code in (400, 422)

    # The source archive is a gzip tar of the pushed folder.
    with httpx.Client(timeout=30) as http:
        body = http.get(details["package_url"]).content
    archive = tmp_path / "source.tar.gz"
    archive.write_bytes(body)
    with tarfile.open(archive, "r:gz") as tar:
        assert any(name.endswith("pyproject.toml") for name in tar.getnames())


def test_eval_list_reads_primeintellect_as_the_builtin_owner(hub: Platform, tmp_path: Path) -> None:
    frank = make_key(hub, "frank")
    builtin = hub.client(frank).get("/environmentshub/proctor/alphabet-sort/@latest")
    created = hub.client(frank).post(
        "/evaluations/",
        json={
            "name": "frank-sort",
            "environments": [{"id": builtin.json()["data"]["id"]}],
            "model_name": "demo",
        },
    )
    assert created.status_code == 201, created.text
    home = tmp_path / "h-frank"
    for ref in ("primeintellect/alphabet-sort", "proctor/alphabet-sort"):
        listed = prime(hub, frank, home, "eval", "list", "--env", ref, "-o", "json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert created.json()["evaluation_id"] in listed.stdout, (ref, listed.stdout)


def test_errors_the_cli_prints_keep_their_bracketed_words(hub: Platform, tmp_path: Path) -> None:
    gina = make_key(hub, "gina")
    folder = standalone_project(tmp_path, "no-entry", "0.1.0")
    text = (folder / "pyproject.toml").read_text()
    head, _, _ = text.partition('[project.entry-points."proctor.environments"]')
    (folder / "pyproject.toml").write_text(head)
    # Refused at push time now (the hub reads the wheel), in one sentence that keeps its
    # backticked names through the prime CLI's printing.
    pushed = prime(hub, gina, tmp_path / "h-gina", "env", "push", cwd=folder)
    output = pushed.stdout + pushed.stderr
    assert pushed.returncode != 0, output
    assert "has no `proctor.environments` entry point" in output, output
    assert "so proctor cannot run it" in output, output


def test_the_page_prime_env_push_links_shows_versions_and_evaluations(
    hub: Platform, tmp_path: Path
) -> None:
    hana = make_key(hub, "hana")
    home = tmp_path / "h-hana"
    folder = standalone_project(tmp_path, "page-echo", "1.0.0")
    first = prime(hub, hana, home, "env", "push", cwd=folder)
    assert first.returncode == 0, first.stdout + first.stderr
    (folder / "README.md").write_text("second version\n")
    text = (folder / "pyproject.toml").read_text().replace('"1.0.0"', '"1.1.0"')
    (folder / "pyproject.toml").write_text(text)
    second = prime(hub, hana, home, "env", "push", cwd=folder)
    assert second.returncode == 0, second.stdout + second.stderr
    link = re.search(r"View on Environments Hub:\s+(\S+)", second.stdout)
    assert link and link.group(1) == f"{hub.url}/dashboard/environments/hana/page-echo"

    api = hub.client(hana)
    env_id = api.get("/environmentshub/hana/page-echo/@latest").json()["data"]["id"]
    created = api.post(
        "/evaluations/",
        json={"name": "page-run", "environments": [{"id": env_id}], "model_name": "demo-model"},
    ).json()["evaluation_id"]
    samples = [{"sample_id": f"s{i}", "example_id": i, "reward": i % 2} for i in range(4)]
    assert api.post(f"/evaluations/{created}/samples", json={"samples": samples}).is_success
    assert api.post(f"/evaluations/{created}/finalize", json={"metrics": {}}).is_success
    versions = api.get("/environmentshub/hana/page-echo/versions").json()["data"]["versions"]

    with httpx.Client(timeout=30) as browser:
        signed_in = browser.post(f"{hub.url}/login", data={"api_key": hana, "next": "/"})
        cookie = {"Cookie": f"proctor_session={signed_in.cookies['proctor_session']}"}
        hop = browser.get(link.group(1), headers=cookie)
        assert hop.status_code == 307 and hop.headers["location"] == "/environments/hana/page-echo"
        page = browser.get(f"{hub.url}{hop.headers['location']}", headers=cookie)
        assert page.status_code == 200, page.text
        html = page.text
        for version in versions:
            assert version["content_hash"] in html and version["wheel_sha256"] in html
        assert "1.0.0" in html and "1.1.0" in html and "PRIVATE" in html
        assert "page-run" in html and "demo-model" in html and "0.5" in html
        assert "prime eval run hana/page-echo --hosted" in html
        listing = browser.get(f"{hub.url}/environments", headers=cookie)
        assert "hana/page-echo" in listing.text and "proctor/alphabet-sort" in listing.text
        as_json = browser.get(
            f"{hub.url}/environments/hana/page-echo?format=json", headers=cookie
        ).json()
        assert [v["version"] for v in as_json["versions"]] == ["1.1.0", "1.0.0"]
        assert as_json["evaluations"][0]["samples"] == 4

        # Someone else's private environment is a 404 page, not a leak.
        other = make_key(hub, "ivan")
        signed = browser.post(f"{hub.url}/login", data={"api_key": other, "next": "/"})
        ivan = {"Cookie": f"proctor_session={signed.cookies['proctor_session']}"}
        hidden = browser.get(f"{hub.url}/environments/hana/page-echo", headers=ivan)
        assert hidden.status_code == 404 and "page-echo" not in hidden.text.split("<main>")[0]
