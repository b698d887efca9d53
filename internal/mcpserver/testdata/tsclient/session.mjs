// Drives `layerfs mcp` over stdio with the official MCP TypeScript SDK
// client through a whole session, printing one JSON line per step (the
// transcript) and exiting non-zero on the first unexpected answer.
//
//   node session.mjs /path/to/layerfs /path/to/store
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [layerfs, store] = process.argv.slice(2);
if (!layerfs || !store) {
  console.error("usage: node session.mjs LAYERFS STORE");
  process.exit(2);
}

const transport = new StdioClientTransport({
  command: layerfs,
  args: ["--store", store, "mcp"],
  env: { ...process.env, LAYERFS_DAEMON: "" },
  stderr: "inherit",
});
const client = new Client({ name: "layerfs-ts-test", version: "1.0.0" });

function step(name, detail) {
  console.log(JSON.stringify({ step: name, ...detail }));
}

function check(cond, what) {
  if (!cond) throw new Error("unexpected: " + what);
}

// call calls a tool; want "ok" needs a result, "error" a tool error.
async function call(name, args, want = "ok") {
  const res = await client.callTool({ name, arguments: args });
  const text = (res.content ?? []).map((c) => c.text ?? "").join("\n");
  step("tools/call " + name, { args, isError: !!res.isError, result: res.isError ? text : res.structuredContent });
  check(!!res.isError === (want === "error"), `${name} ${want === "error" ? "succeeded" : "failed: " + text}`);
  return res.isError ? text : res.structuredContent;
}

try {
  await client.connect(transport);
  const info = client.getServerVersion();
  step("initialize", { server: info, capabilities: client.getServerCapabilities() });
  check(info.name === "layerfs", "server name " + info.name);

  const { tools } = await client.listTools();
  step("tools/list", { tools: tools.map((t) => t.name) });
  for (const want of ["workspace_create", "workspace_list", "exec", "read_file", "write_file", "list_dir", "stat", "diff", "commit", "fork", "log", "checkout", "workspace_end"]) {
    const t = tools.find((t) => t.name === want);
    check(t && t.description.length > 40 && t.inputSchema.type === "object" && t.outputSchema, "tool " + want);
  }

  await call("project_create", { name: "demo" });
  const ws = await call("workspace_create", { project: "demo", branch: "main" });
  check(/^[a-z0-9-]+$/.test(ws.id), "workspace id " + ws.id);
  await call("write_file", { workspace: ws.id, path: "notes/hello.txt", content: "hello from TypeScript\n" });
  const ex = await call("exec", { workspace: ws.id, command: "cat notes/hello.txt" });
  check(ex.exit_code === 0 && ex.stdout === "hello from TypeScript\n", "exec cat: " + JSON.stringify(ex));
  const cm = await call("commit", { workspace: ws.id, message: "hello from TypeScript" });
  check(cm.result === "created", "commit " + cm.result);
  const br = await call("fork", { project: "demo", name: "alt", from: "main" });
  check(br.head === cm.commit, "fork head " + br.head);
  const diff = await call("diff", { project: "demo", from: "layer:1", to: "alt" });
  check(diff.changes.some((c) => c.path === "notes/hello.txt" && c.kind === "added"), "diff " + JSON.stringify(diff));
  const text = await call("write_file", { workspace: ws.id, path: "../outside", content: "x" }, "error");
  check(text.includes("invalid_argument"), "escape refused with " + text);

  const uri = `layerfs://workspaces/${ws.id}/files/notes/hello.txt`;
  const rr = await client.readResource({ uri });
  step("resources/read", { uri, contents: rr.contents });
  check(rr.contents[0].text === "hello from TypeScript\n", "resource text");

  const end = await call("workspace_end", { workspace: ws.id });
  check(end.ended === ws.id, "end " + JSON.stringify(end));
  await client.close();
  step("close", {});
} catch (err) {
  console.error("session.mjs: " + (err.stack ?? err));
  await client.close().catch(() => {});
  process.exit(1);
}
