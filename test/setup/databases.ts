import { afterAll } from "vitest";
import { dropTestDatabases } from "../helpers/db";

// Registered here, at a file's top level: vitest ignores an afterAll a hook or a test registers,
// which is how every suite's database used to outlive it.
afterAll(dropTestDatabases);
