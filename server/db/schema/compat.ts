import { bigint, customType, index, integer, jsonb, pgTable, primaryKey, text, uuid } from "drizzle-orm/pg-core";
import { ownedRowColumns, } from "./auth";
import { subagentBatches, subagentBatchItems } from "./batches";
import { at, createdAtColumn, parentColumn } from "./columns";

/**
 * The OpenAI- and Anthropic-compatible batch APIs (server/compat). Uploaded files are stored in
 * chunks so neither an upload nor a download ever holds a whole file in memory; a compatible
 * batch is an ordinary durable batch plus the provider-facing fields kept here.
 */

const bytea = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => "bytea" });

export const COMPAT_APIS = ["openai", "anthropic"] as const;
export type CompatApi = (typeof COMPAT_APIS)[number];

export const compatFiles = pgTable(
  "compat_files",
  {
    ...ownedRowColumns(),
    filename: text("filename").notNull(),
    purpose: text("purpose").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
    lines: integer("lines").notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [index("compat_files_user_idx").on(t.userId, t.createdAt, t.id)],
);

/** The bytes of a file in order; chunks are about 1 MiB (a line may span two). */
export const compatFileChunks = pgTable(
  "compat_file_chunks",
  {
    fileId: parentColumn("file_id", () => compatFiles.id),
    seq: integer("seq").notNull(),
    data: bytea("data").notNull(),
  },
  (t) => [primaryKey({ columns: [t.fileId, t.seq] })],
);

export const compatBatches = pgTable(
  "compat_batches",
  {
    ...ownedRowColumns(),
    api: text("api", { enum: COMPAT_APIS }).notNull(),
    /** The durable batch that runs the requests; null for an OpenAI batch that failed validation. */
    batchId: uuid("batch_id")
      .unique()
      .references(() => subagentBatches.id, { onDelete: "cascade" }),
    /** OpenAI: the uploaded input file (kept as an id: deleting the file leaves the batch). */
    inputFileId: uuid("input_file_id"),
    endpoint: text("endpoint"),
    completionWindow: text("completion_window").notNull(),
    metadata: jsonb("metadata").$type<Record<string, string> | null>(),
    /** OpenAI `errors.data` of a batch that failed validation. */
    errors: jsonb("errors").$type<{ code: string; message: string; param: string | null; line: number | null }[] | null>(),
    total: integer("total").notNull(),
    createdAt: createdAtColumn(),
    expiresAt: at("expires_at").notNull(),
    cancelRequestedAt: at("cancel_requested_at"),
    /** Set when the completion window passed with work left: the cancelled items are `expired`. */
    expiredAt: at("expired_at"),
  },
  (t) => [index("compat_batches_list_idx").on(t.userId, t.api, t.createdAt, t.id)],
);

/** The normalized request of one item (what the compat executor sends to the model). */
export const compatRequests = pgTable("compat_requests", {
  itemId: uuid("item_id")
    .primaryKey()
    .references(() => subagentBatchItems.id, { onDelete: "cascade" }),
  body: jsonb("body").$type<Record<string, unknown>>().notNull(),
});
