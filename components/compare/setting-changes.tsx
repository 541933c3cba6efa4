import type { CompareSummary } from "@/lib/api/compare";

const SETTING_NAMES: Record<CompareSummary["differences"][number]["setting"], string> = {
  prompt_template: "Prompt template",
  model: "Model",
  subagent: "Sub-agent",
  output_schema: "Output schema",
  checks: "Checks",
  golden_set: "Golden set",
  lane: "Lane",
  examples: "Examples",
};

/** What changed from A to B: each setting that differs, A's value beside B's; or that none did. */
export function SettingChanges({ differences }: { differences: CompareSummary["differences"] }) {
  return (
    <section aria-labelledby="compare-settings-heading" data-testid="compare-settings" className="min-w-0">
      <h2 id="compare-settings-heading" className="mb-1 text-xs font-medium tracking-wide text-zinc-500 uppercase">
        What changed from A to B
      </h2>
      {differences.length === 0 ? (
        <p className="text-sm text-zinc-600">
          Nothing in the settings: the same template, model, sub-agent, output schema, checks, lane and examples.
        </p>
      ) : (
        <dl className="grid min-w-0 gap-2 rounded-lg border border-zinc-200 bg-white p-2 text-xs sm:p-3">
          {differences.map((d) => (
            <div key={d.setting} data-testid="compare-setting" data-setting={d.setting} className="grid min-w-0 gap-1 sm:grid-cols-[8rem_minmax(0,1fr)_minmax(0,1fr)] sm:gap-3">
              <dt className="font-medium text-zinc-800">{SETTING_NAMES[d.setting]}</dt>
              {(["a", "b"] as const).map((side) => (
                <dd key={side} className="flex min-w-0 gap-1.5">
                  <span className="font-semibold text-zinc-500">{side.toUpperCase()}</span>
                  <pre
                    data-testid={`compare-setting-${side}`}
                    className="max-h-40 min-w-0 flex-1 overflow-auto rounded bg-zinc-50 px-1.5 py-1 font-mono whitespace-pre-wrap wrap-anywhere text-zinc-800"
                  >
                    {d[side] ?? "none"}
                  </pre>
                </dd>
              ))}
            </div>
          ))}
        </dl>
      )}
    </section>
  );
}
