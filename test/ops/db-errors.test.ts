import { sql } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { createDatabase } from "@/server/db/client";
import { isDatabaseUnavailable } from "@/server/ops/db-errors";
import { createTestDatabase } from "../helpers/db";

describe("isDatabaseUnavailable", () => {
  it("recognises a refused connection through drizzle's wrapper", async () => {
    const dead = createDatabase("postgres://postgres@127.0.0.1:1/none", { max: 1 });
    try {
      const err = await dead.db.execute(sql`select 1`).catch((e) => e);
      expect(err).toBeInstanceOf(Error);
      expect(isDatabaseUnavailable(err)).toBe(true);
    } finally {
      await dead.close();
    }
  });

  it("recognises a connection terminated by the server (admin shutdown)", async () => {
    const t = await createTestDatabase();
    const victim = createDatabase(t.url, { max: 1, applicationName: "victim" });
    try {
      await victim.db.execute(sql`select 1`);
      // A long query on the victim, terminated from another session as a restart would.
      const pending = victim.db.execute(sql`select pg_sleep(5)`).catch((e) => e);
      await new Promise((r) => setTimeout(r, 200));
      await t.db.execute(
        sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'victim' and datname = current_database()`,
      );
      const err = await pending;
      expect(err).toBeInstanceOf(Error);
      expect(isDatabaseUnavailable(err)).toBe(true);
      // and the pool reconnects by itself (a query racing the close may still see the FATAL)
      let rows: unknown[] = [];
      for (let i = 0; i < 5 && rows.length === 0; i++) {
        rows = await victim.db.execute(sql`select 1 as ok`).catch(async (e) => {
          expect(isDatabaseUnavailable(e)).toBe(true);
          await new Promise((r) => setTimeout(r, 100));
          return [];
        });
      }
      expect(rows[0]).toEqual({ ok: 1 });
    } finally {
      await victim.close();
    }
  });

  it("does not mistake a query error for an outage", async () => {
    const t = await createTestDatabase();
    const err = await t.db.execute(sql`select * from no_such_table`).catch((e) => e);
    expect(isDatabaseUnavailable(err)).toBe(false);
    expect(isDatabaseUnavailable(new Error("model failed"))).toBe(false);
    expect(isDatabaseUnavailable(undefined)).toBe(false);
  });
});
