import type { VariantDraft } from "@/lib/api/variants";
import type { FlotillaConfig } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { catalogEntries } from "@/server/models/catalog";
import { type BatchScopeArgs, getBatch } from "./owned";
import { parseExecutionSpec } from "./spec";

/** What a variant of this batch starts from: its spec's settings as a submission names them (DESIGN "Judging a batch"). */
export async function variantDraft(db: DbOrTx, args: BatchScopeArgs & { config: FlotillaConfig }): Promise<VariantDraft> {
  const batch = await getBatch(db, args);
  const spec = parseExecutionSpec(batch.executionSpec);
  return {
    subagent: batch.subagent,
    model: spec.model.name,
    prompt_template: spec.prompt_template,
    output_schema: spec.output_schema,
    // The golden set's check comes with golden_set, never as a check of its own.
    checks: spec.checks.filter((c) => c.type !== "golden"),
    golden_set: spec.golden_set,
    max_running_items: batch.maxRunningItems,
    examples: spec.examples && { golden_set: spec.examples.golden_set, version: spec.examples.version, count: spec.examples.count },
    review: batch.reviewWhen ? { when: batch.reviewWhen, ...(batch.reviewRate === null ? {} : { rate: batch.reviewRate }) } : null,
    models: catalogEntries(args.config).map((e) => e.name),
  };
}
