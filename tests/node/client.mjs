// Drive `trio-pty mcp` with the official TypeScript SDK's client (a second, independent
// implementation of MCP), for tests/test_mcp_node.py.
//
//   node client.mjs '{"command": "...", "args": [...], "env": {...}, "cwd": "...", "python": "..."}'
//
// Prints one JSON object: what each call returned (the client checks every structured
// result against the tool's output schema), and how long closing took.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const server = JSON.parse(process.argv[2]);
const transport = new StdioClientTransport({
  command: server.command,
  args: server.args,
  env: server.env,
  cwd: server.cwd,
  stderr: "inherit",
});
const client = new Client({ name: "trio-pty-node-test", version: "1.0.0" });
const report = {};

const text = (result) => result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
const call = async (name, args) => {
  const result = await client.callTool({ name, arguments: args });
  return { isError: result.isError ?? false, text: text(result), data: result.structuredContent ?? null };
};

await client.connect(transport);
report.server = client.getServerVersion();
report.protocol = transport.protocolVersion ?? null;
const tools = (await client.listTools()).tools;
report.tools = tools.map((tool) => ({
  name: tool.name,
  required: tool.inputSchema.required ?? [],
  hasOutputSchema: Boolean(tool.outputSchema),
}));

report.exit3 = await call("exec_command", { cmd: "echo hi; exit 3" });
const long = await call("exec_command", { cmd: "echo started; sleep 60", yield_time_ms: 2000 });
report.long = long;
report.interrupted = await call("write_stdin", { session_id: long.data.session_id, keys: ["C-c"] });
report.spawned = await call("spawn", {
  command: server.python,
  args: ["-m", "http.server", "0", "--bind", "127.0.0.1"],
  ready_pattern: "Serving HTTP on",
  yield_time_ms: 15000,
});
report.screen = await call("screen", { session_id: report.spawned.data.session_id });
report.killed = await call("kill", { session_id: report.spawned.data.session_id });
report.listed = await call("list_sessions", {});
report.missing = await call("read_output", { session_id: "pty_00000000" });

const began = Date.now();
await client.close(); // stdin closed; 2 s later it would be SIGTERMed
report.closeMs = Date.now() - began;
process.stdout.write(JSON.stringify(report));
