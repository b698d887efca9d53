"""A workspace's network against a real layerfsd: egress by rule, every
decision seen, changed live. Nothing leaves the machine: the only address
tried is refused by the daemon's egress before it could."""

from __future__ import annotations

import pytest

import layerfs

# TEST-NET-3: no rule admits it, so the egress refuses it at the host.
DENIED = "203.0.113.9"


def test_network(client, project):
    ws = client.workspaces.create(project, network="egress",
                                  egress=[layerfs.NetworkRule(domain="pypi.org", ports=["443"])])
    try:
        assert ws.info.network == "egress"
        assert ws.info.egress == [layerfs.NetworkRule(domain="pypi.org", ports=["443"])]
        with ws.watch(timeout=120) as events:
            res = ws.exec(f"curl -sS --max-time 5 http://{DENIED}/")
            assert res.exit_code != 0
            assert res.receipt.network is not None and res.receipt.network.mode == "egress"
            for ev in events:
                if ev.kind == "net" and ev.net.address == DENIED:
                    assert (ev.net.verdict, ev.net.proto, ev.net.port) == ("denied", "tcp", 80)
                    break
        with pytest.raises(layerfs.InvalidArgument):
            ws.set_network("egress", [{"cidr": "0.0.0.0/0"}])
        assert ws.status().network == "egress"
        info = ws.set_network("none")
        assert info.network == "none" and info.egress == []
        assert ws.exec("true").receipt.network.mode == "none"
    finally:
        ws.end(discard=True)
