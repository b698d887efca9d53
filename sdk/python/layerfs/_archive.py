"""Tar streams for uploading and downloading trees, checked so that nothing
lands outside the destination whatever the stream holds."""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
import tempfile
from typing import BinaryIO

from .errors import InvalidArgument


def pack(local: str, name: str) -> BinaryIO:
    """A spooled tar of ``local``: a directory's entries relative to it, a
    symlink as the single entry ``name``. The caller closes it."""
    f = tempfile.SpooledTemporaryFile(max_size=8 << 20)
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tw:
        if os.path.isdir(local) and not os.path.islink(local):
            for entry in sorted(os.listdir(local)):
                tw.add(os.path.join(local, entry), arcname=entry, filter=_anonymous)
        else:
            tw.add(local, arcname=name, recursive=False, filter=_anonymous)
    f.seek(0)
    return f


def _anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if not (ti.isreg() or ti.isdir() or ti.issym()):
        raise InvalidArgument(f"upload {ti.name}: only files, directories and symlinks can be uploaded")
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


class UnsafeEntry(InvalidArgument):
    """A downloaded tar entry that would land outside the destination."""


def _clean(name: str) -> str:
    if not name or "\x00" in name or name.startswith("/"):
        raise UnsafeEntry(f"tar entry {name!r}: empty, NUL or absolute")
    if ".." in name.split("/"):
        raise UnsafeEntry(f"tar entry {name!r} contains ..")
    return posixpath.normpath(name)


def unpack(stream: BinaryIO, dest: str) -> None:
    """Extract a tar stream whose entries all sit below one top name (a file,
    or a directory and its tree) to ``dest``, like ``cp -r``: into an
    existing directory under the top's base name (the root "." merges into
    it), else as ``dest`` itself."""
    top = root = to = None
    symlinks: set[str] = set()
    with tarfile.open(fileobj=stream, mode="r|") as tr:
        for ti in tr:
            name = _clean(ti.name)
            if top is None:
                top = name
                if os.path.isdir(dest):
                    root, to = dest, ("." if top == "." else posixpath.basename(top))
                elif ti.isdir():
                    os.makedirs(dest, exist_ok=True)
                    root, to = dest, "."
                else:
                    root, to = os.path.dirname(os.path.abspath(dest)) or ".", os.path.basename(dest)
            if name == top:
                rel = to
            elif top == ".":
                rel = posixpath.normpath(posixpath.join(to, name))
            elif name.startswith(top + "/"):
                rel = posixpath.normpath(posixpath.join(to, name[len(top) + 1:]))
            else:
                raise UnsafeEntry(f"tar entry {ti.name!r} is not below {top!r}")
            for parent in _parents(rel):
                if parent in symlinks:
                    raise UnsafeEntry(f"tar entry {ti.name!r} lies below a symlink of the archive")
            target = os.path.join(root, rel)
            _check_inside(root, os.path.dirname(target))
            if ti.isdir():
                if rel != ".":
                    os.makedirs(target, exist_ok=True)
                    os.chmod(target, (ti.mode & 0o777) | 0o700)
            elif ti.isreg():
                os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
                if os.path.islink(target):
                    os.remove(target)
                src = tr.extractfile(ti)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, ti.mode & 0o777)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(target, ti.mode & 0o777)
                os.utime(target, (ti.mtime, ti.mtime))
            elif ti.issym():
                link = ti.linkname
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
                if not link or link.startswith("/") or joined == ".." or joined.startswith("../"):
                    raise UnsafeEntry(f"symlink {ti.name!r} -> {link!r} leaves the destination")
                os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
                if os.path.lexists(target) and not os.path.isdir(target):
                    os.remove(target)
                os.symlink(link, target)
                symlinks.add(rel)
            else:
                raise UnsafeEntry(f"tar entry {ti.name!r} has a type that cannot be downloaded")
    if top is None:
        raise InvalidArgument("empty archive")


def _parents(rel: str):
    parts = rel.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])


def _check_inside(root: str, path: str) -> None:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root + os.sep):
        raise UnsafeEntry(f"{path} resolves outside {root}")
