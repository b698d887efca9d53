"""The synchronous API against a real layerfsd."""

from __future__ import annotations

import os

import pytest

import layerfs


def test_workflow(client, project):
    ws = client.workspaces.create(project, branch="main")
    assert ws.id and ws.info.branch == "main" and ws.info.state == "mounted"
    ws.files.write("src/app.py", "print('hello from python')\n")
    res = ws.exec("python3 src/app.py", timeout=60)
    assert res.exit_code == 0 and res.ok
    assert res.stdout == "hello from python\n"
    assert res.receipt.wall_ns >= res.receipt.command_ns > 0
    assert res.receipt.store_bytes_written == 0 and not res.receipt.shared_mount  # the exec alone, nothing stored
    if ws.info.data_path.startswith("fuse"):  # on overlay, upper files are read in the kernel
        assert res.receipt.fuse_requests > 0

    assert [(c.path, c.kind) for c in ws.changes()] == [("src", "added")]  # a new tree is one change
    cr = ws.commit("app")
    assert cr.result == "created" and cr.created and cr.head == cr.commit
    assert ws.commit("again").result == "up-to-date"

    br = client.branches.fork(project, "alt", from_ref="main")
    assert br.head == cr.commit
    assert {b.name for b in client.branches.list(project)} == {"main", "alt"}
    with client.workspaces.create(project, branch="alt") as ws2:
        assert ws2.files.read_text("src/app.py") == "print('hello from python')\n"
        ws2.files.write("src/app.py", "print('alternative')\n")
        assert ws2.commit("alternative").created

    log = client.log(project, "alt")
    assert [c.message for c in log[:2]] == ["alternative", "app"]
    assert log[0].time is not None and log[0].stats.files == 1
    changes = client.diff(project, "main", "alt")
    assert [(c.path, c.kind) for c in changes] == [("src", "modified"), ("src/app.py", "modified")]
    assert client.commit(project, "main").id == cr.commit

    ws.end()
    assert ws.id not in [w.id for w in client.workspaces.list()]


def test_exec_options(client, project):
    with client.workspaces.create(project) as ws:
        res = ws.exec(["sh", "-c", "exit 7"])
        assert res.exit_code == 7 and not res.ok
        res = ws.exec("tr a-z A-Z", stdin="shout\n")
        assert res.stdout == "SHOUT\n"
        ws.files.write("sub/.keep", "")
        res = ws.exec("echo $GREETING; pwd", env={"GREETING": "hi"}, cwd="sub")
        assert res.stdout.splitlines()[0] == "hi" and res.stdout.splitlines()[1].endswith("/sub")
        res = ws.exec("echo out; echo err >&2")
        assert (res.stdout, res.stderr) == ("out\n", "err\n")
        res = ws.exec("ulimit -n", open_files=64, pids=100, memory_bytes=256 << 20)
        assert res.stdout == "64\n", res
        res = ws.exec("sleep 30", timeout=0.5)
        assert res.timed_out and not res.ok


def test_exec_streams_as_output_arrives(client, project):
    """The callback gets "ready" while the command still runs: the command
    waits for a file that only the callback writes."""
    with client.workspaces.create(project) as ws:
        seen = []

        def on_stdout(text):
            seen.append(text)
            if "ready" in "".join(seen) and not ws.files.exists("go"):
                ws.files.write("go", "went\n")

        res = ws.exec("echo ready; for i in $(seq 600); do [ -e go ] && break; sleep 0.1; done; cat go",
                      timeout=120, on_stdout=on_stdout)
        assert res.exit_code == 0, res.stderr
        assert "".join(seen) == "ready\nwent\n"
        assert res.stdout == "ready\nwent\n"


def test_files(client, project, tmp_path):
    with client.workspaces.create(project) as ws:
        ws.files.write("bin/tool", b"\x00\x01\xff", mode=0o755)
        assert ws.files.read("bin/tool") == b"\x00\x01\xff"
        st = ws.files.stat("bin/tool")
        assert (st.path, st.type, st.size, st.mode) == ("bin/tool", "file", 3, 0o755) and st.is_file
        assert ws.files.stat("bin").is_dir and ws.files.stat(".").is_dir
        assert ws.files.exists("bin/tool") and not ws.files.exists("nope")

        src = tmp_path / "src"
        (src / "pkg").mkdir(parents=True)
        (src / "pkg" / "mod.py").write_text("X = 1\n")
        (src / "README").write_text("readme\n")
        os.symlink("pkg/mod.py", src / "link")
        ws.files.upload(str(src), "project")
        one = tmp_path / "one.txt"
        one.write_text("single\n")
        ws.files.upload(str(one), "project/one.txt")
        names = [(e.path, e.type) for e in ws.files.list("project", recursive=True)]
        assert names == [("project/README", "file"), ("project/link", "symlink"), ("project/one.txt", "file"),
                         ("project/pkg", "dir"), ("project/pkg/mod.py", "file")]
        assert [e.path for e in ws.files.list()] == ["bin", "project"]
        assert ws.files.stat("project/link").target == "pkg/mod.py"

        out = tmp_path / "out"
        ws.files.download("project", str(out))
        assert (out / "pkg" / "mod.py").read_text() == "X = 1\n"
        assert os.readlink(out / "link") == "pkg/mod.py"
        ws.files.download("project/README", str(tmp_path / "readme-copy"))
        assert (tmp_path / "readme-copy").read_text() == "readme\n"
        existing = tmp_path / "existing"
        existing.mkdir()
        ws.files.download("bin/tool", str(existing))
        assert (existing / "tool").read_bytes() == b"\x00\x01\xff"


def test_errors(client, project, tmp_path):
    ws = client.workspaces.create(project)
    for bad in ("../escape", "/../escape"):
        with pytest.raises(layerfs.InvalidArgument):
            ws.files.write(bad, "x")
    ws.files.write("/abs.txt", "a")  # a leading "/" is the workspace root
    assert ws.files.read("abs.txt") == b"a"
    with pytest.raises(layerfs.InvalidArgument):
        ws.files.stat("a/../../b")
    with pytest.raises(layerfs.NotFound) as e:
        ws.files.read("missing.txt")
    assert e.value.code == "not_found" and e.value.status == 404 and "missing.txt" in str(e.value)
    with pytest.raises(layerfs.NotFound):
        client.workspaces.get("ws-000000000000")
    with pytest.raises(layerfs.NotFound):
        client.workspaces.create("no-such-project")
    with pytest.raises(layerfs.AlreadyExists):
        client.projects.create(project)
    with pytest.raises(layerfs.InvalidArgument):
        client.branches.fork(project, "Bad Name")
    with pytest.raises(layerfs.InvalidArgument):
        ws.files.write("x", "y", mode=0o7777)

    # A symlink leaving the workspace is never followed into a download.
    ws.exec("ln -s /etc evil && ln -s ../../outside up")
    with pytest.raises(layerfs.InvalidArgument):
        ws.files.download(".", str(tmp_path / "dl"))
    assert not (tmp_path / "outside").exists()

    # Two workspaces of one branch: the second commit loses the race.
    other = client.workspaces.create(project)
    other.files.write("f", "other")
    assert other.commit("first").created
    lost = ws.commit("second")
    assert lost.result == "head-moved" and lost.head != lost.commit
    other.end()

    ws.files.write("draft", "unsaved")
    with pytest.raises(layerfs.UncommittedChanges):
        ws.end()
    ws.end(discard=True)
    with pytest.raises(layerfs.NotFound):
        ws.end()


def test_workspace_settings(client, project):
    with client.workspaces.create(project) as ws:
        assert ws.info.durability == "commit"  # the daemon's default
    with client.workspaces.create(project, data_path="fuse", durability="fsync") as ws:
        assert ws.info.durability == "fsync" and ws.info.data_path.startswith("fuse")
        assert ws.exec("echo x > f && sync f").ok
    with pytest.raises(layerfs.InvalidArgument):
        client.workspaces.create(project, durability="never")


def test_workspace_owner(client, project, tmp_path):
    """The mount path is its owner's: the sandbox's root shows as the
    owner there (the daemon's sandboxes run in a user namespace)."""
    with client.workspaces.create(project, owner=(1000, 1000), mount_path=str(tmp_path / "ws")) as ws:
        assert ws.info.owner == layerfs.Owner(uid=1000, gid=1000)
        assert ws.exec("echo x > made-inside").ok
        st = os.stat(os.path.join(ws.info.mount_path, "made-inside"))
        assert (st.st_uid, st.st_gid) == (1000, 1000)
    with pytest.raises(layerfs.InvalidArgument):
        client.workspaces.create(project, owner=(2_000_000_005, 0))


def test_context_manager_ends(client, project):
    with client.workspaces.create(project) as ws:
        ws.files.write("scratch", "dropped on exit")
        wid = ws.id
    assert wid not in [w.id for w in client.workspaces.list()]


def test_find_daemon(daemon, monkeypatch):
    monkeypatch.setenv("LAYERFS_DAEMON", daemon["address"])
    with layerfs.Client() as c:
        assert c.version().api == "v1" and c.version().store == daemon["store"]
    with pytest.raises(layerfs.DaemonUnreachable):
        layerfs.Client("unix:///nonexistent/layerfsd.sock")
    with pytest.raises(ValueError):
        layerfs.Client("ftp://host")
