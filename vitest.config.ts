import path from "node:path";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: { alias: { "@": path.resolve(__dirname) } },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/setup/postgres.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two cores: integration suites each own a database, so a little parallelism is safe.
    maxWorkers: 2,
  },
});
