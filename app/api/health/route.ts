import { sql } from "drizzle-orm";
import { getDatabase } from "@/server/db/client";
import { json } from "@/server/http/route";
import { log } from "@/server/log";

export const dynamic = "force-dynamic";

/** Liveness for load balancers and anyone else: no internals (the database error goes to the log only). */
export async function GET() {
  try {
    await getDatabase().db.execute(sql`select 1`);
    return json({ status: "ok", database: "ok" });
  } catch (err) {
    log.warn({ err: (err as { code?: string }).code ?? (err as Error).name }, "health check: database unavailable");
    return json({ status: "error", database: "unavailable" }, 503);
  }
}
