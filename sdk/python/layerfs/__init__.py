"""LayerFS for Python: workspaces with history for agents.

A client of layerfsd's HTTP API that needs only the standard library::

    from layerfs import Client

    client = Client()                                  # the default Store's daemon, as the CLI finds it
    with client.workspaces.create("demo", branch="main") as ws:
        ws.files.write("hello.py", "print('hi')\\n")
        res = ws.exec("python3 hello.py", timeout=60, on_stdout=print)
        if res.exit_code == 0:
            ws.commit("hello works")

``layerfs.aio.AsyncClient`` is the same API for asyncio. Errors are
subclasses of :class:`LayerFSError`, one per API error code.
"""

from ._attach import Attached
from ._ports import PortConnection, PortForward
from .aio import AsyncAttached, AsyncClient, AsyncEventStream, AsyncWorkspace
from .client import Branches, Client, EventStream, Files, Images, Projects, Workspace, Workspaces
from .errors import (AlreadyExists, Busy, Conflict, DaemonLost, DaemonUnreachable, HeadMoved, InternalError,
                     InvalidArgument, LayerFSError, Misdirected, NoSpace, NotFound, PortUnreachable, TooLarge, Unauthorized,
                     Unavailable, UncommittedChanges)
from .types import (Branch, Change, Commit, CommitResult, CommitStats, ConflictSide, ExecResult, FileEvent, FileInfo,
                    Image, ImageConfig, ImageLayer, ImageResult, ImageStats, BuildStep, MergeInfo, MergeResult, Node, Owner,
                    NetEvent, NetUsage, NetworkChange, NetworkRule, PortShare, Project, Receipt, Service, ServiceList,
                    UpdateResult, Version, WorkspaceInfo, WorkspaceStatus)

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "Workspace", "AsyncWorkspace", "Files", "Projects", "Workspaces", "Branches", "Images",
    "EventStream", "AsyncEventStream", "FileEvent", "Attached", "AsyncAttached", "PortConnection", "PortForward",
    "LayerFSError", "InvalidArgument", "Unauthorized", "NotFound", "AlreadyExists", "HeadMoved",
    "UncommittedChanges", "Busy", "TooLarge", "Unavailable", "InternalError", "NoSpace", "Misdirected",
    "Conflict", "DaemonUnreachable", "DaemonLost", "PortUnreachable", "PortShare",
    "Branch", "Change", "Commit", "CommitResult", "CommitStats", "ConflictSide", "ExecResult", "FileInfo",
    "Image", "ImageConfig", "ImageLayer", "ImageResult", "ImageStats", "BuildStep",
    "MergeInfo", "MergeResult", "Node", "Owner", "Project", "Receipt", "Service", "ServiceList", "UpdateResult", "Version",
    "WorkspaceInfo", "WorkspaceStatus", "NetworkRule", "NetworkChange", "NetEvent", "NetUsage",
]
