# Two tools flood their own egress proxies inside one `agentguard mcp` process while a third,
# network = "none", is called: the independent Python client (PyPI `mcp`) calls the floods
# concurrently, then the third while both still run (three run slots, so it never waits for
# theirs: what is tested is the descriptor budget, not how fast a flood's kill ends), and
# prints the three results as one JSON line.
# Usage: mcp_flood.py PRLIMIT_NOFILE AGENTGUARD CONFIG
import asyncio, json, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main(nofile, binary, config):
    params = StdioServerParameters(
        command="prlimit", args=[f"--nofile={nofile}:{nofile}", "--", binary, "mcp", "--config", config,
                                  "--max-concurrent", "3"])
    async with Client(params, mode="legacy", read_timeout_seconds=300) as client:
        await client.list_tools()
        floods = [asyncio.create_task(client.call_tool(t, {}, read_timeout_seconds=300))
                  for t in ("flood_a", "flood_b")]
        await asyncio.sleep(4)
        offline = await client.call_tool("offline", {}, read_timeout_seconds=300)
        done = [await f for f in floods]
        print(json.dumps({name: {"is_error": r.is_error, "structured": r.structured_content}
                          for name, r in zip(("flood_a", "flood_b", "offline"), done + [offline])}))

asyncio.run(main(*sys.argv[1:]))
