/**
 * Writes lib/output-schema-meta/*.generated.ts: the JSON Schema meta-schemas (draft-07, 2019-09,
 * 2020-12) compiled ahead of time by Ajv's standalone code, with the output schemas' options.
 * The browser's Content-Security-Policy forbids eval, which Ajv's compile needs, so the New
 * batch dialog checks a draft schema against these. Run after upgrading ajv:
 * `npx tsx scripts/output-schema-meta.ts` (test/panel/results-ui.test.ts checks they are current).
 */
import { writeFileSync } from "node:fs";
import path from "node:path";
import { metaSchemaSources } from "../lib/output-schema-meta-source";

for (const { file, code } of metaSchemaSources()) writeFileSync(path.join(import.meta.dirname, "../lib/output-schema-meta", file), code);
