import type { Check, OutputSchema } from "@/lib/api/batch-data";
import { checkPatternProblem, newPatternBudget } from "@/lib/check-pattern";
import { outputSchemaProblem } from "@/lib/output-schema-check";
import { labelled } from "./typed-input";

/**
 * What the server would still refuse in a well-formed Output schema and Checks: a schema that
 * does not compile (Ajv, the server's options) and a pattern RE2 does not compile or that is
 * over the pattern budget (the checks' patterns together too), each named as the dialog labels
 * its field. Ajv and RE2 are large: the dialog imports this module only once a field is filled.
 */
export function typedCompileProblems(
  schema: OutputSchema | undefined,
  checks: readonly Check[] | undefined,
): { schemaError: string | null; checksError: string | null } {
  const schemaProblem = schema === undefined ? null : outputSchemaProblem(schema);
  let checksError: string | null = null;
  const budget = newPatternBudget();
  for (const [i, check] of (checks ?? []).entries()) {
    if (check.type !== "regex") continue;
    const problem = checkPatternProblem(check.pattern, check.flags, budget);
    if (problem) {
      checksError = labelled(`checks.${i}.pattern`, problem);
      break;
    }
  }
  return { schemaError: schemaProblem ? labelled(schemaProblem.field, schemaProblem.message) : null, checksError };
}
