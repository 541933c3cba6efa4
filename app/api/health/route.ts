import { sql } from "drizzle-orm";
import { getDatabase } from "@/server/db/client";
import { json } from "@/server/http/route";

export const dynamic = "force-dynamic";

export async function GET() {
  try {
    await getDatabase().db.execute(sql`select 1`);
    return json({ status: "ok", database: "ok" });
  } catch (err) {
    return json({ status: "error", database: (err as Error).message }, 503);
  }
}
