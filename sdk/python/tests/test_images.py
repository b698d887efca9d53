"""Images through the synchronous and the asyncio API, against a real layerfsd:
an image imported from a directory is a workspace's root, its root's
changes a new image, and a project's default."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import layerfs
from layerfs.aio import AsyncClient


def _copy(src: str, root: Path) -> None:
    dst = root / src.lstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), dst)


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    """A small root: bash and cat with their libraries, an os-release."""
    root = tmp_path_factory.mktemp("image")
    for name in ("bash", "cat"):
        binary = shutil.which(name)
        (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(binary), root / "usr" / "bin" / name)
        for word in subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout.split():
            if word.startswith("/"):
                _copy(word, root)
    for d in ("lib", "lib64"):
        if (root / d).exists():
            shutil.copytree(root / d, root / "usr" / d, dirs_exist_ok=True)
            shutil.rmtree(root / d)
        (root / d).symlink_to("usr/" + d)
    (root / "bin").symlink_to("usr/bin")
    (root / "usr" / "bin" / "sh").symlink_to("bash")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "os-release").write_text("ID=pytest\n")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return root


def test_images(client, project, image_dir):
    name = f"py/{project}:1"
    res = client.images.import_(name, "dir", str(image_dir))
    assert res.image.name == name and len(res.image.layers) == 1 and res.stats.layers_read == 1
    assert client.images.get(res.image.ref).digest == res.image.digest

    ws = client.workspaces.create(project, image=name)
    assert ws.info.image == res.image.ref
    r = ws.exec("cat /etc/os-release; echo tool > /usr/tool")
    assert r.exit_code == 0 and r.stdout == "ID=pytest\n", r.stderr
    assert r.receipt.image == res.image.ref
    nxt = ws.commit_image(f"py/{project}:2")
    assert len(nxt.image.layers) == 2
    ws.end(discard=True)

    assert client.projects.set_image(project, f"py/{project}:2").image == f"py/{project}:2"
    with client.workspaces.create(project) as ws2:
        assert ws2.exec("cat /usr/tool").stdout == "tool\n"
    client.projects.set_image(project, None)

    built = client.images.build(f"py/{project}:3", f"FROM py/{project}:2\nARG WHO\nRUN echo $WHO > /usr/who\n",
                                args={"WHO": "python"})
    assert [s.cached for s in built.steps] == [False, False, False]
    with client.workspaces.create(project, image=built.image.ref) as ws3:
        assert ws3.exec("cat /usr/who /usr/tool").stdout == "python\ntool\n"
    with pytest.raises(layerfs.InvalidArgument):
        client.images.build(f"py/{project}:4", f"FROM py/{project}:2\nVOLUME /x\n")

    assert any(i.name == name for i in client.images.list())
    client.images.remove(name)
    with pytest.raises(layerfs.NotFound):
        client.images.get(name)
    with pytest.raises(layerfs.InvalidArgument):
        client.images.import_("Bad Name", "dir", str(image_dir))


def test_images_async(daemon, project, image_dir):
    async def main():
        async with await AsyncClient.connect(daemon["address"], autostart=False) as c:
            name = f"py/{project}-aio:1"
            res = await c.images.import_(name, "dir", str(image_dir))
            ws = await c.workspaces.create(project, image=res.image.ref)
            r = await ws.exec("cat /etc/os-release")
            assert r.stdout == "ID=pytest\n"
            img = await ws.commit_image(f"py/{project}-aio:2")
            assert img.image.layers[0].commit == res.image.layers[0].commit
            await ws.end(discard=True)
            assert (await c.images.get(name)).digest == res.image.digest
            await c.images.remove(name)

    asyncio.run(main())
