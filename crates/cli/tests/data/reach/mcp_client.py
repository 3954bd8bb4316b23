"""Drive skillbox's MCP server with the official Python SDK (PyPI `mcp`), as an agent tool would.

Usage: mcp_client.py (http URL TOKEN | stdio SKILLBOX_BIN DATA_DIR) MODE SKILL PEER REQUEST [approve|none]
MODE: "legacy" (initialize, 2025-11-25) or "2026-07-28" (stateless: the SDK probes
`server/discover` and must settle on 2026-07-28; pinning the version would skip the probe and
leave the server's capabilities unknown).
Prints one JSON object: everything the server sent back, for the Rust test to check and scan.
On stdio, `skillbox mcp` gets the test's SKILLBOX_LOG and writes its stderr to the file
SKILLBOX_MCP_STDERR names (the test scans it with the nodes' logs).
"""

import asyncio
import json
import os
import sys

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def dump(x):
    if hasattr(x, "model_dump"):
        return x.model_dump(mode="json", by_alias=True, exclude_none=True)
    return x


async def main():
    args = sys.argv[1:]
    if args[0] == "http":
        url, token = args[1], args[2]
        rest = args[3:]
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(600))
        server = streamable_http_client(url, http_client=http)
    else:
        binary, data_dir = args[1], args[2]
        rest = args[3:]
        env = {k: os.environ[k] for k in ["SKILLBOX_LOG"] if k in os.environ}
        stderr_path = os.environ.get("SKILLBOX_MCP_STDERR")
        errlog = open(stderr_path, "a") if stderr_path else sys.stderr
        params = StdioServerParameters(command=binary, args=["--data-dir", data_dir, "mcp"], env=env)
        server = stdio_client(params, errlog=errlog)
    mode, skill, peer, request = rest[0], rest[1], rest[2], rest[3]
    consent = rest[4] if len(rest) > 4 else "none"
    out = {"progress": [], "elicitations": []}

    async def on_elicit(context, params):
        out["elicitations"].append(dump(params))
        return types.ElicitResult(action="accept", content={"approve": consent == "approve"})

    async def on_progress(progress, total, message):
        out["progress"].append({"progress": progress, "total": total, "message": message})

    kwargs = {"mode": "legacy" if mode == "legacy" else "auto", "read_timeout_seconds": 600}
    if consent != "none":
        kwargs["elicitation_callback"] = on_elicit
    async with Client(server, **kwargs) as client:
        out["protocolVersion"] = client.protocol_version
        out["capabilities"] = dump(client.server_capabilities)
        tools = await client.list_tools()
        out["tools"] = dump(tools)
        out["list_skills"] = dump(await client.call_tool("list_skills", {}))
        out["list_sources"] = dump(await client.call_tool("list_sources", {}))
        res = await client.list_resources()
        out["resources"] = dump(res)
        out["stubs"] = [dump(await client.read_resource(r.uri)) for r in res.resources]
        out["apply"] = dump(
            await client.call_tool(
                "apply_skill",
                {"skill": skill, "peer": peer, "request": request},
                progress_callback=on_progress,
            )
        )
        sc = out["apply"].get("structuredContent") or {}
        if sc.get("callId"):
            out["status"] = dump(await client.call_tool("call_status", {"callId": sc["callId"]}))
        out["bad_args"] = dump(await client.call_tool("apply_skill", {"skill": 7}))
        try:
            await client.call_tool("no_such_tool", {})
            out["unknown_tool"] = "no error"
        except Exception as e:  # the SDK raises the JSON-RPC error
            out["unknown_tool"] = {"type": type(e).__name__, "text": str(e), "code": getattr(getattr(e, "error", None), "code", None)}
    print(json.dumps(out))


asyncio.run(main())
