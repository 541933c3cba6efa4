import { afterAll } from "vitest";

// Registered here, at a file's top level: vitest ignores an afterAll a hook or a test registers,
// which is how every suite's database used to outlive it. The helpers are imported when the file
// ends, not before it starts: imported up front (and the server modules behind them with them),
// compare-export's exports.max_seconds cut did not happen when it ran beside export-content
// (2 of 4 failed, every time); imported here, both pass together and alone.
afterAll(async () => {
  const { dropTestDatabases } = await import("../helpers/db");
  await dropTestDatabases();
});
