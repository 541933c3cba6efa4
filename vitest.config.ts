import path from "node:path";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: {
    alias: {
      "@": path.resolve(__dirname),
      // Tests load route handlers and web-only modules in plain Node: server-only resolves to its
      // empty module, as under Next's react-server condition (the worker never imports it).
      "server-only": path.resolve(__dirname, "node_modules/server-only/empty.js"),
    },
  },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/setup/postgres.ts"],
    // Only the configuration a test gives (never the checkout's flotilla.config.json or the
    // shell's); each file drops the databases it made.
    setupFiles: ["test/setup/config.ts", "test/setup/databases.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two cores: integration suites each own a database, so a little parallelism is safe.
    maxWorkers: 2,
  },
});
