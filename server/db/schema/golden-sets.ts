import { sql } from "drizzle-orm";
import { index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { ownedRowColumns } from "./auth";
import { at, countColumn, createdAtColumn, parentColumn } from "./columns";

/**
 * Golden sets (DESIGN "Reviews that teach"): named, owner-scoped sets of items with the answer
 * people said was right, versioned. Versions are immutable and cost no copy: an item row holds
 * one answer for one item_key from the version that added it (`added_in`) until the version that
 * replaced it (`replaced_in`, null while current), so version v is the rows with
 * added_in <= v < coalesce(replaced_in, infinity).
 */

export const GOLDEN_DECISIONS = ["accepted", "corrected"] as const;

export const goldenSets = pgTable(
  "golden_sets",
  {
    ...ownedRowColumns(),
    name: text("name").notNull(),
    /** The newest version (1 at creation; each add makes the next). */
    version: integer("version").notNull().default(1),
    /** Items in the newest version. */
    items: countColumn("items"),
    createdAt: createdAtColumn(),
    updatedAt: at("updated_at").notNull().defaultNow(),
  },
  (t) => [index("golden_sets_user_idx").on(t.userId, t.updatedAt)],
);

export const goldenSetVersions = pgTable(
  "golden_set_versions",
  {
    setId: parentColumn("set_id", () => goldenSets.id),
    version: integer("version").notNull(),
    /** Items in this version (the previous version's, plus those added). */
    items: integer("items").notNull(),
    /** Where its new answers came from: { from: "batch", batch_id } or { from: "items" }. */
    source: jsonb("source").$type<{ from: "batch"; batch_id: string } | { from: "items" }>().notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [primaryKey({ columns: [t.setId, t.version] })],
);

export const goldenSetItems = pgTable(
  "golden_set_items",
  {
    setId: parentColumn("set_id", () => goldenSets.id),
    itemKey: text("item_key").notNull(),
    addedIn: integer("added_in").notNull(),
    /** The version whose add gave this item_key a newer answer; null while this one is current. */
    replacedIn: integer("replaced_in"),
    /** The string that filled {{item}} (or the prompt); null for an item of fields. */
    input: text("input"),
    /** An item of fields: its fields; null for a string item. */
    fields: jsonb("fields"),
    expected: jsonb("expected").notNull(),
    /** The reviewed batch item it came from (no reference: a set outlives the batch). */
    sourceBatchId: uuid("source_batch_id"),
    sourceItemId: uuid("source_item_id"),
    decision: text("decision", { enum: GOLDEN_DECISIONS }),
  },
  (t) => [
    // Pages of a version walk item_key order; the rows of one key are its versions.
    primaryKey({ columns: [t.setId, t.itemKey, t.addedIn] }),
    // One current answer per key: what an add replaces.
    uniqueIndex("golden_set_items_current_uq").on(t.setId, t.itemKey).where(sql`replaced_in is null`),
  ],
);
