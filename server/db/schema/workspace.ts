import { sql } from "drizzle-orm";
import { bigint, check, customType, pgTable, text, timestamp, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { users } from "./auth";
import { threads } from "./chat";
import { agentRuns } from "./runs";

const bytea = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => "bytea" });

/**
 * The files of a thread's workspace. Bytes live in the row (bytea, stored uncompressed out of
 * line — see the workspace_sql migration — so a download reads them slice by slice with
 * substring()). `size` is kept beside the bytes so totals never detoast them.
 */
export const workspaceFiles = pgTable(
  "workspace_files",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    userId: uuid("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    threadId: uuid("thread_id")
      .notNull()
      .references(() => threads.id, { onDelete: "cascade" }),
    path: text("path").notNull(),
    bytes: bytea("bytes").notNull(),
    size: bigint("size", { mode: "number" }).notNull(),
    sha256: text("sha256").notNull(),
    contentType: text("content_type").notNull(),
    /** The sub-agent run that wrote it; null for an upload. */
    createdByRunId: uuid("created_by_run_id").references(() => agentRuns.id, { onDelete: "set null" }),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    // Also the listing index: every read filters by thread and orders by path.
    uniqueIndex("workspace_files_thread_path_key").on(t.threadId, t.path),
    check("workspace_files_size_check", sql`${t.size} = octet_length(${t.bytes})`),
  ],
);
