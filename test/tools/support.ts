import path from "node:path";

/** The real MCP servers from npm (devDependencies), run with this Node over stdio. */
const bin = (pkg: string) => path.resolve(process.cwd(), "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js");

/** `mcp.servers` for a test: `fs` serves `dir`; `memory` keeps its graph in a file under it. */
export function mcpTestServers(dir: string) {
  return {
    fs: { command: process.execPath, args: [bin("server-filesystem"), dir] },
    memory: {
      command: process.execPath,
      args: [bin("server-memory")],
      env: { MEMORY_FILE_PATH: path.join(dir, "memory.jsonl") },
    },
  };
}
