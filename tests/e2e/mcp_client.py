# The independent MCP client of the e2e suite: the Python SDK (PyPI `mcp`, pinned in
# xtask/src/setup.rs), run from the venv `cargo xtask setup` makes. Starts `agentguard mcp`,
# lists the tools, calls one (with no arguments, or once per arguments object given), and
# prints what it saw as one JSON line.
# Usage: mcp_client.py AGENTGUARD CONFIG MODE TOOL [ARGUMENTS_JSON_LIST]
#   (MODE: legacy, auto or 2026-07-28; with the list, "calls" holds one result per object)
import asyncio, json, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters

def seen(result):
    return {"is_error": result.is_error, "structured": result.structured_content,
            "text": result.content[0].text}

async def main(binary, config, mode, tool, arguments=None):
    params = StdioServerParameters(command=binary, args=["mcp", "--config", config])
    progress = []
    async def on_progress(p, total, message):
        progress.append([p, total, message])
    async with Client(params, mode=mode, read_timeout_seconds=300) as client:
        tools = await client.list_tools()
        if arguments is not None:
            calls = [seen(await client.call_tool(tool, a, read_timeout_seconds=300))
                     for a in json.loads(arguments)]
            schema = next(t.input_schema for t in tools.tools if t.name == tool)
            print(json.dumps({"tools": [t.name for t in tools.tools], "schema": schema,
                              "calls": calls}))
            return
        result = await client.call_tool(tool, {}, read_timeout_seconds=300, progress_callback=on_progress)
        print(json.dumps({"tools": [t.name for t in tools.tools], "is_error": result.is_error,
                          "structured": result.structured_content, "text": result.content[0].text,
                          "progress": progress}))

asyncio.run(main(*sys.argv[1:]))
