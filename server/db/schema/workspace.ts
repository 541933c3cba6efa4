import { sql } from "drizzle-orm";
import { bigint, check, customType, pgTable, primaryKey, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { ownedRowColumns, } from "./auth";
import { threadColumn } from "./chat";
import { createdAtColumn, } from "./columns";
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
    ...ownedRowColumns(),
    threadId: threadColumn(),
    path: text("path").notNull(),
    bytes: bytea("bytes").notNull(),
    size: bigint("size", { mode: "number" }).notNull(),
    sha256: text("sha256").notNull(),
    contentType: text("content_type").notNull(),
    /** The sub-agent run that wrote it; null for an upload. */
    createdByRunId: uuid("created_by_run_id").references(() => agentRuns.id, { onDelete: "set null" }),
    createdAt: createdAtColumn(),
  },
  (t) => [
    // Also the listing index: every read filters by thread and orders by path.
    uniqueIndex("workspace_files_thread_path_key").on(t.threadId, t.path),
    check("workspace_files_size_check", sql`${t.size} = octet_length(${t.bytes})`),
  ],
);

/**
 * Idempotency keys of workspace writes (issue 26): a batch item's write_file records its key
 * (`<batch_id>:<item_key>:<step>`) with the path in the write's transaction; a replay of the same
 * key and path in the same thread writes nothing.
 */
export const workspaceWriteKeys = pgTable(
  "workspace_write_keys",
  {
    threadId: threadColumn(),
    idempotencyKey: text("idempotency_key").notNull(),
    path: text("path").notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [primaryKey({ columns: [t.threadId, t.idempotencyKey, t.path] })],
);
