import type { Metadata } from "next";
import Link from "next/link";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { Badge } from "@/components/ui/badge";
import { formatCount } from "@/lib/format";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { listRateLimitEndpoints, listWorkers, type WorkerView } from "@/server/ops/workers";
import { livenessWindowSeconds } from "@/server/runtime/heartbeat";
import { AutoRefresh } from "./refresh";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Workers · Flotilla" };

function ago(iso: string, now: number): string {
  const s = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86_400)} d ago`;
}

function State({ w }: { w: WorkerView }) {
  if (w.alive) return <Badge tone="green">Live</Badge>;
  if (w.stopped_at) return <Badge title={`stopped ${w.stopped_at}`}>Stopped</Badge>;
  return <Badge tone="red" title="no heartbeat within the liveness window; its leases expire and are taken over">Lost</Badge>;
}

function Time({ iso, now }: { iso: string; now: number }) {
  return (
    <time dateTime={iso} title={iso}>
      {ago(iso, now)}
    </time>
  );
}

function AdminOnly() {
  return (
    <div className="min-h-0 flex-1 overflow-y-auto p-6">
      <div className="mx-auto max-w-xl rounded-lg border border-zinc-200 bg-white p-6">
        <h1 className="text-xl font-semibold tracking-tight">Workers</h1>
        <p className="mt-2 text-sm text-zinc-600">This page shows every worker of the deployment and is for its admin only.</p>
      </div>
    </div>
  );
}

/** Live and recently dead worker processes, and what each one is working on. */
export default async function WorkersPage() {
  const user = await currentUser();
  if (!user) redirect("/signin");
  // Operational view of the whole deployment: the admin's.
  if (!user.isAdmin) return <AdminOnly />;
  const config = getConfig();
  const db = getDatabase().db;
  const [workers, endpoints] = await Promise.all([
    listWorkers(db, { userId: user.id, livenessSeconds: livenessWindowSeconds(config.subagent_batches.lease_seconds) }),
    listRateLimitEndpoints(db),
  ]);
  const now = Date.now();
  const live = workers.filter((w) => w.alive);
  const th = "px-3 py-2 text-left text-xs font-medium uppercase tracking-wide text-zinc-500";
  // Below md each row is a card: cells stack in two columns, each named by its data-label.
  const td =
    "px-3 py-2 align-top text-sm max-md:flex max-md:flex-col max-md:items-start max-md:gap-0.5 max-md:px-0 max-md:py-1 max-md:before:text-[11px] max-md:before:font-medium max-md:before:uppercase max-md:before:tracking-wide max-md:before:text-zinc-500 max-md:before:content-[attr(data-label)]";
  const table = "w-full max-md:block";
  const head = "border-b border-zinc-200 bg-zinc-50 max-md:sr-only";
  const body = "divide-y divide-zinc-100 max-md:block";
  const row = "max-md:grid max-md:grid-cols-2 max-md:gap-x-4 max-md:px-4 max-md:py-3";

  return (
    <div className="min-h-0 flex-1 overflow-y-auto p-6">
      <AutoRefresh />
      <div className="mx-auto max-w-6xl space-y-8">
        <header>
          <h1 className="text-xl font-semibold tracking-tight">Workers</h1>
          <p className="mt-1 text-sm text-zinc-500">
            {live.length} live · {workers.length - live.length} stopped or lost in the last 24 h · capacity{" "}
            {live.reduce((n, w) => n + w.capacity, 0)} · running {live.reduce((n, w) => n + w.running, 0)}
          </p>
        </header>

        {workers.length === 0 ? (
          <p className="rounded-lg border border-dashed border-zinc-300 p-6 text-sm text-zinc-500">
            No worker has reported in the last 24 hours. Start one with <code>npm run worker</code>.
          </p>
        ) : (
          <div className="overflow-x-auto rounded-lg border border-zinc-200 bg-white">
            <table className={`${table} md:min-w-[56rem]`} aria-label="Workers">
              <thead className={head}>
                <tr>
                  <th className={th}>State</th>
                  <th className={th}>Host</th>
                  <th className={th}>PID</th>
                  <th className={th}>Version</th>
                  <th className={th}>Capacity</th>
                  <th className={th}>Running</th>
                  <th className={th}>Last heartbeat</th>
                  <th className={th}>Started</th>
                  <th className={th}>Working on</th>
                </tr>
              </thead>
              <tbody className={body}>
                {workers.map((w) => (
                  <tr key={w.id} data-worker-id={w.id} className={`${row} ${w.alive ? "" : "text-zinc-500"}`}>
                    <td data-label="State" className={td}>
                      <State w={w} />
                    </td>
                    <td data-label="Host" className={`${td} font-mono text-xs`} title={w.id}>
                      {w.host}
                    </td>
                    <td data-label="PID" className={`${td} font-mono text-xs`}>{w.pid}</td>
                    <td data-label="Version" className={td}>{w.version}</td>
                    <td data-label="Capacity" className={td}>{w.capacity}</td>
                    <td data-label="Running" className={td}>{w.running}</td>
                    <td data-label="Last heartbeat" className={td}>
                      <Time iso={w.last_heartbeat_at} now={now} />
                    </td>
                    <td data-label="Started" className={td}>
                      <Time iso={w.started_at} now={now} />
                    </td>
                    <td data-label="Working on" className={`${td} max-md:col-span-2`}>
                      {w.batches.length === 0 && w.other_items === 0 ? (
                        <span className="text-zinc-400">—</span>
                      ) : (
                        <ul className="space-y-1">
                          {w.batches.map((b) => (
                            <li key={b.batch_id}>
                              <Link
                                href={`/threads/${b.thread_id}`}
                                className="text-sky-700 underline-offset-2 hover:underline"
                                title={`batch ${b.batch_id}`}
                              >
                                {b.subagent} batch {b.batch_id.slice(0, 8)}
                              </Link>{" "}
                              <span className="text-xs text-zinc-500">
                                {b.running} running · {b.leased} leased · {b.batch_status}
                              </span>
                            </li>
                          ))}
                          {w.other_items > 0 && (
                            <li className="text-xs text-zinc-500">
                              {w.other_items} item{w.other_items === 1 ? "" : "s"} of other users' batches
                            </li>
                          )}
                        </ul>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}

        <section aria-labelledby="endpoints-heading" className="space-y-2">
          <h2 id="endpoints-heading" className="text-base font-semibold tracking-tight">
            Model endpoints
          </h2>
          <p className="text-sm text-zinc-500">
            Limits are learned from each provider&apos;s own rate-limit headers; a stated limit is an upper bound
            ({config.rate_limits.requests_per_minute || "no"} requests/min · {config.rate_limits.tokens_per_minute || "no"}{" "}
            tokens/min by default in this process&apos;s configuration, or the catalog entry&apos;s own).
          </p>
          {endpoints.length === 0 ? (
            <p className="text-sm text-zinc-500">
              Nothing recorded yet: an endpoint appears once a provider answers (or a shared budget is set).
            </p>
          ) : (
            <div className="overflow-x-auto rounded-lg border border-zinc-200 bg-white">
              <table className={table} aria-label="Model endpoints">
                <thead className={head}>
                  <tr>
                    <th className={th}>Endpoint</th>
                    <th className={th}>Learned limit</th>
                    <th className={th}>Requests</th>
                    <th className={th}>Tokens (budgeted)</th>
                    <th className={th}>429s</th>
                    <th className={th}>Last 429</th>
                    <th className={th}>Back-off</th>
                  </tr>
                </thead>
                <tbody className={body}>
                  {endpoints.map((e) => (
                    <tr key={e.endpoint} className={row}>
                      <td data-label="Endpoint" className={`${td} font-mono text-xs max-md:col-span-2`}>{e.endpoint}</td>
                      <td data-label="Learned limit" className={td} data-testid="learned-limit">
                        {e.learned.length === 0 ? "—" : e.learned.map((l) => learnedText(l)).join(" · ")}
                      </td>
                      <td data-label="Requests" className={td}>{e.requests}</td>
                      <td data-label="Tokens (budgeted)" className={td}>{e.tokens || "—"}</td>
                      <td data-label="429s" className={td}>{e.rate_limited}</td>
                      <td data-label="Last 429" className={td}>{e.last_rate_limited_at ? <Time iso={e.last_rate_limited_at} now={now} /> : "—"}</td>
                      <td data-label="Back-off" className={td}>
                        {e.slowed_for_ms > 0 ? <Badge tone="amber">{(e.slowed_for_ms / 1000).toFixed(1)} s</Badge> : "—"}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </section>
      </div>
    </div>
  );
}

const KIND_UNIT: Record<string, string> = { requests: "req", tokens: "tok", input_tokens: "input tok", output_tokens: "output tok" };

/** "1,200 req/min", with the share paced at when another program draws on the key: "1,200 req/min (using 50 %)". */
function learnedText(l: { kind: string; per_minute: number; share: number }): string {
  const base = `${formatCount(l.per_minute)} ${KIND_UNIT[l.kind] ?? l.kind}/min`;
  return l.share < 0.995 ? `${base} (using ${Math.round(l.share * 100)} %)` : base;
}
