import {
  type CreateGoldenSet,
  type GoldenInclude,
  type GoldenItemPage,
  type GoldenSetAdded,
  type GoldenSetCreated,
  type GoldenSetDetail,
  type GoldenSetSummary,
  goldenItemPageSchema,
  goldenSetAddedSchema,
  goldenSetCreatedSchema,
  goldenSetDetailSchema,
  goldenSetListSchema,
} from "@/lib/api/golden-sets";
import { fetchJson, request, sendJson } from "@/lib/api/client";

/** The golden-set pages' and dialogs' calls (app/api/golden-sets/**), each checked with its lib/api schema. */

export const GOLDEN_PAGE_SIZE = 50;

export const goldenKeys = {
  list: ["golden-sets"] as const,
  detail: (id: string) => ["golden-sets", id] as const,
  items: (id: string, version: number) => ["golden-sets", id, "items", version] as const,
};

const setPath = (id: string) => `/api/golden-sets/${encodeURIComponent(id)}`;

export const goldenSetPagePath = (id: string) => `/golden-sets/${encodeURIComponent(id)}`;

/** The download of one version's items, a JSON object a line. */
export const goldenItemsJsonlPath = (id: string, version: number) => `${setPath(id)}/items.jsonl?version=${version}`;

export async function fetchGoldenSets(signal?: AbortSignal): Promise<GoldenSetSummary[]> {
  return (await fetchJson(goldenSetListSchema, "/api/golden-sets", "list of golden sets", { signal })).golden_sets;
}

export function fetchGoldenSet(id: string, signal?: AbortSignal): Promise<GoldenSetDetail> {
  return fetchJson(goldenSetDetailSchema, setPath(id), "golden set", { signal });
}

export function fetchGoldenItems(id: string, version: number, cursor: string | null, signal?: AbortSignal): Promise<GoldenItemPage> {
  const q = new URLSearchParams({ version: String(version), limit: String(GOLDEN_PAGE_SIZE) });
  if (cursor) q.set("cursor", cursor);
  return fetchJson(goldenItemPageSchema, `${setPath(id)}/items?${q}`, "golden set items", { signal });
}

/** A batch's reviewed items as a new set (version 1). */
export function createGoldenSetFromBatch(name: string, batchId: string, include: GoldenInclude[]): Promise<GoldenSetCreated> {
  const body: CreateGoldenSet = { name, from_batch: { batch_id: batchId, include } };
  return sendJson(goldenSetCreatedSchema, "/api/golden-sets", "golden set", body);
}

/** A batch's reviewed items added to a set: a new version. */
export function addBatchToGoldenSet(id: string, batchId: string, include: GoldenInclude[]): Promise<GoldenSetAdded> {
  return sendJson(goldenSetAddedSchema, `${setPath(id)}/add`, "golden set version", { from_batch: { batch_id: batchId, include } });
}

export async function deleteGoldenSet(id: string): Promise<void> {
  await request(setPath(id), { method: "DELETE" });
}
