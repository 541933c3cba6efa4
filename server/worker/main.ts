import { getConfig } from "@/server/config/load";
import { createDatabase, databaseUrlFromEnv } from "@/server/db/client";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { HEARTBEAT_INTERVAL_MS, markStopped, writeHeartbeat } from "./heartbeat";

/** Worker entrypoint: `npm run worker`. Never imports Next.js. */
async function main() {
  const config = getConfig();
  const database = createDatabase(databaseUrlFromEnv(), { applicationName: "flotilla-worker" });
  const capacity = config.subagent_runtime.max_running;
  const beat = () => writeHeartbeat(database.db, { id: INSTANCE_ID, capacity, running: 0 });
  await beat();
  const timer = setInterval(() => beat().catch((e) => console.error("heartbeat failed", e)), HEARTBEAT_INTERVAL_MS);
  console.log(`worker ${INSTANCE_ID} started (capacity ${capacity})`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`worker ${INSTANCE_ID} stopping on ${signal}`);
    clearInterval(timer);
    await markStopped(database.db, INSTANCE_ID).catch(() => {});
    await database.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
