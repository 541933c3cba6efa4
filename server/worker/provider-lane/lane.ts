import { matchingAs } from "@/server/runtime/pattern-thread";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import type { FlotillaConfig } from "@/lib/config";
import { settleItems } from "@/server/batches/claim";
import {
  type BatchProvider,
  batchOf,
  cancelRest,
  holdItems,
  itemsAtProvider,
  type LeasedProviderBatch,
  leaseDueProviderBatches,
  providerBatchAgeSeconds,
  type ProviderBatchUpdate,
  releaseItems,
  type Taken,
  takeForProvider,
  takenItemKeys,
  updateProviderBatch,
} from "@/server/batches/provider-lane/store";
import { snapshotPrices } from "@/server/batches/budget";
import { withExamples } from "@/server/batches/examples";
import { type Settlement, settlementOf, type Usage } from "@/server/batches/settlement";
import { type ExecutionSpec, parseExecutionSpec } from "@/server/batches/spec";
import type { ClaimedItem } from "@/server/batches/types";
import type { Db } from "@/server/db/client";
import { errorText } from "@/server/errors";
import { INVALID_USAGE_ERROR } from "@/lib/api/subagents";
import type { Logger } from "@/server/log";
import { type CatalogEntry, catalogEntries, costUsd, findCatalogEntry } from "@/server/models/catalog";
import { resolveModelByName } from "@/server/models/index";
import type { ResolvedModel } from "@/server/models/types";
import type { SubagentRuntime } from "@/server/runtime/admission";
import { Coalescer } from "../coalesce";
import { checkAnswer, type ItemRunResult, withFeedback } from "../execute";
import { type BatchResult, type BatchRequest, batchApiFor, type ProviderBatchApi, type ResultLine } from "./providers";
import { answerReader, lanePromptCache, requestBuilder } from "./requests";

/**
 * The provider lane of a worker: sends the items of `lane: "provider_batch"` batches to the
 * provider's batch API, polls each provider batch under its lease (provider-lane.sql), and when
 * one ends settles its results as live answers would be (settlement.ts, settle.sql). Items at the
 * provider hold no slot and no item lease; only a repair turn, a judge, or an expired request sent
 * back to the live lane (`adopt`: the worker's own slots) runs live.
 */

export interface ProviderLaneOptions {
  db: Db;
  config: FlotillaConfig;
  workerId: string;
  runtime: SubagentRuntime;
  /** A model injected for tests and benchmarks (used when its catalog name is the batch's). */
  model?: ResolvedModel;
  /** Expired requests on the live lane: leased items handed to the worker's slots. */
  adopt: (items: ClaimedItem[], spec: ExecutionSpec) => void;
  log: Logger;
}

/** Results settled per round trip. */
const SETTLE_CHUNK = 500;
/** Provider batches one worker leases per tick. */
const LEASE_LIMIT = 4;
/** A provider that refused a batch is asked again after this long. */
const REFUSED_DELAY_SECONDS = 30;
/** Text a provider sent that is stored (an error, a refusal): at most this many characters. */
const PROVIDER_TEXT_MAX = 4096;
/** Configured keys at least this long are redacted from provider text (shorter ones are not secrets worth the false hits). */
const SECRET_MIN_CHARS = 8;
/** Polls a provider gets to end a cancelled batch (at least CANCEL_GRACE_MIN_SECONDS); then its requests are cancelled here. */
const CANCEL_GRACE_POLLS = 10;
const CANCEL_GRACE_MIN_SECONDS = 10;

interface Context {
  spec: ExecutionSpec;
  provider: BatchProvider;
  entry: CatalogEntry;
  api: ProviderBatchApi;
  status: string;
  /** Seconds since the batch was cancelled (null unless it is). */
  cancelledSeconds: number | null;
}

export class ProviderLane {
  private readonly tick: Coalescer;
  private timer: ReturnType<typeof setInterval> | undefined;
  private readonly controller = new AbortController();
  private readonly cfg: FlotillaConfig["provider_batch"];
  /** Provider batches submitted, polled and settled by this worker (tests, benchmarks). */
  readonly counters = { submitted: 0, polls: 0, settled: 0, adopted: 0 };
  /** Every configured model key: a provider echoing one back never gets it stored or shown. */
  private readonly secrets: string[];

  constructor(private readonly o: ProviderLaneOptions) {
    this.cfg = o.config.provider_batch;
    this.secrets = [...new Set(catalogEntries(o.config).map((e) => e.apiKey ?? ""))].filter((k) => k.length >= SECRET_MIN_CHARS);
    this.tick = new Coalescer(
      () => this.runTick(),
      (err) => o.log.warn({ err }, "provider lane tick failed; retrying at the next"),
    );
  }

  start(): void {
    const everyMs = Math.max(50, Math.min(this.cfg.poll_seconds, this.o.config.subagent_batches.poll_interval_seconds) * 1000);
    this.timer = setInterval(() => this.tick.request(), everyMs);
    this.tick.request();
  }

  kick(): void {
    this.tick.request();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.controller.abort();
    await this.tick.close();
  }

  private get stopped(): boolean {
    return this.controller.signal.aborted;
  }

  private async runTick(): Promise<void> {
    // Send what is waiting (a provider batch at a time), then poll what is due.
    for (let i = 0; i < 8 && !this.stopped; i++) {
      const taken = await takeForProvider(this.o.db, { owner: this.o.workerId, limit: this.cfg.max_requests, leaseSeconds: this.cfg.lease_seconds });
      if (!taken) break;
      await this.submit(taken);
    }
    if (this.stopped) return;
    const due = await leaseDueProviderBatches(this.o.db, { owner: this.o.workerId, leaseSeconds: this.cfg.lease_seconds, limit: LEASE_LIMIT });
    for (const pb of due) {
      if (this.stopped) return;
      try {
        await this.poll(pb);
      } catch (err) {
        this.o.log.warn({ err, provider_batch_id: pb.id }, "provider batch poll failed; polling again later");
        await this.update(pb.id, { lastError: this.providerText(errorText(err)), nextPollSeconds: this.cfg.poll_seconds }).catch(() => {});
      }
    }
  }

  private update(id: string, update: ProviderBatchUpdate): Promise<boolean> {
    return updateProviderBatch(this.o.db, { owner: this.o.workerId, id, leaseSeconds: this.cfg.lease_seconds, update });
  }

  /** Text a provider sent, as stored: configured keys redacted, at most PROVIDER_TEXT_MAX characters. */
  private providerText(text: string): string {
    // Redacted whole before the cut, so no part of a key survives it (linear: a line is at most 8 MiB).
    let kept = text;
    for (const key of this.secrets) kept = kept.replaceAll(key, "[redacted]");
    return kept.length > PROVIDER_TEXT_MAX ? `${kept.slice(0, PROVIDER_TEXT_MAX)}… (cut)` : kept;
  }

  private async context(batchId: string): Promise<Context | null> {
    const batch = await batchOf(this.o.db, batchId);
    if (!batch) return null;
    const spec = parseExecutionSpec(batch.spec);
    const provider = spec.batch_provider ?? "anthropic";
    const entry = findCatalogEntry(this.o.config, spec.model.name);
    if (!entry?.baseURL) throw new Error(`model "${spec.model.name}" is not in this worker's catalog`);
    return { spec, provider, entry, api: batchApiFor(provider, entry), status: batch.status, cancelledSeconds: batch.cancelledSeconds };
  }

  /** Sends a provider batch; one that cannot be sent gives its items back to the queue (not before REFUSED_DELAY_SECONDS). */
  private async submit(taken: Taken): Promise<void> {
    const ids = taken.items.map((i) => i.id);
    const release = (which: string[], error: string | null, delaySeconds: number) =>
      releaseItems(this.o.db, { owner: this.o.workerId, providerBatchId: taken.providerBatchId, ids: which, error, delaySeconds });
    let ctx: Context | null;
    try {
      ctx = await this.context(taken.batchId);
    } catch (err) {
      await release(ids, `provider_batch: ${this.providerText(errorText(err))}`, REFUSED_DELAY_SECONDS);
      return;
    }
    if (!ctx) return;
    try {
      await this.send(taken, ctx);
    } catch (err) {
      this.o.log.warn({ err, provider_batch_id: taken.providerBatchId }, "the provider batch could not be sent; its items go back to the queue");
      await release(ids, `provider_batch: ${this.providerText(errorText(err))}`, REFUSED_DELAY_SECONDS);
    }
  }

  /** The requests (as the live call would send them, within the provider's limits), then the provider batch. */
  private async send(taken: Taken, ctx: Context): Promise<void> {
    const release = (which: string[], error: string | null, delaySeconds: number) =>
      releaseItems(this.o.db, { owner: this.o.workerId, providerBatchId: taken.providerBatchId, ids: which, error, delaySeconds });
    const build = requestBuilder(ctx.provider, ctx.entry, ctx.spec, lanePromptCache(ctx.entry, ctx.spec, taken.batchId));
    const requests: BatchRequest[] = [];
    const overflow: string[] = [];
    let bytes = 0;
    // The lease is kept while the requests are built; a worker that lost it stops here (the next
    // poller abandons the provider batch and its items go back to the queue).
    const renewEveryMs = (this.cfg.lease_seconds * 1000) / 3;
    let renewedAt = Date.now();
    // Examples leave out the item itself, known by its key.
    const keys = ctx.spec.examples ? await takenItemKeys(this.o.db, taken.items.map((i) => i.id)) : null;
    for (const item of taken.items) {
      if (Date.now() - renewedAt > renewEveryMs) {
        if (!(await this.update(taken.providerBatchId, {}))) return;
        renewedAt = Date.now();
      }
      const prompt = item.feedback ? withFeedback(item.prompt, item.feedback) : item.prompt;
      const request = { customId: item.id, body: await build(keys ? withExamples(ctx.spec, keys.get(item.id) ?? "", prompt) : prompt) };
      const size = ctx.api.size(request);
      if (requests.length >= ctx.api.maxRequests || bytes + size > ctx.api.maxBytes) overflow.push(item.id);
      else {
        requests.push(request);
        bytes += size;
      }
    }
    // Past the provider's limits: back to the queue for the next provider batch.
    if (overflow.length) await release(overflow, null, 0);
    if (!(await this.update(taken.providerBatchId, {}))) return;
    const created = await ctx.api.create(requests, taken.providerBatchId);
    this.counters.submitted++;
    await this.update(taken.providerBatchId, {
      state: "in_progress",
      externalId: created.externalId,
      ...(created.inputFileId ? { inputFileId: created.inputFileId } : {}),
      nextPollSeconds: this.cfg.poll_seconds,
    });
  }

  /**
   * One poll: read the state, settle once it ended. A provider batch past its deadline
   * (`provider_batch.deadline_seconds` after it was taken: the provider's completion window and a
   * margin) is cancelled at the provider and its requests end here as expired ones do, whatever
   * the provider says; a cancelled batch's go through pollCancelled.
   */
  private async poll(pb: LeasedProviderBatch): Promise<void> {
    const ctx = await this.context(pb.batchId);
    if (!ctx || !pb.externalId) return;
    this.counters.polls++;
    if (ctx.status === "cancelled") return this.pollCancelled(pb, ctx);
    if ((await providerBatchAgeSeconds(this.o.db, pb.id)) > this.cfg.deadline_seconds) {
      await ctx.api.cancel(pb.externalId).catch((err) => this.o.log.warn({ err, provider_batch_id: pb.id }, "cancelling an overdue provider batch failed"));
      const why = `the provider did not end this batch within provider_batch.deadline_seconds (${this.cfg.deadline_seconds} s); its requests end as expired`;
      if (!(await this.update(pb.id, { state: "ended", lastError: why }))) return;
      return this.settle(pb, ctx, { read: false });
    }
    if (pb.state !== "ended") {
      const polled = await ctx.api.poll(pb.externalId);
      const seen = { providerStatus: polled.status, counts: polled.counts };
      if (!polled.ended) {
        await this.update(pb.id, { ...seen, nextPollSeconds: this.cfg.poll_seconds });
        return;
      }
      if (!(await this.update(pb.id, { ...seen, state: "ended" }))) return;
    }
    await this.settle(pb, ctx, { read: true });
  }

  /**
   * A cancelled batch's provider batch: cancelled at the provider, what finished there kept once it
   * ends, the rest cancelled. Its items always end: a provider that fails the cancel, the poll or
   * the results, or has not ended the batch CANCEL_GRACE_POLLS polls after the cancel, has the
   * rest cancelled here.
   */
  private async pollCancelled(pb: LeasedProviderBatch, ctx: Context): Promise<void> {
    let state = pb.state;
    let failure: string | null = null;
    try {
      if (state === "in_progress") {
        await ctx.api.cancel(pb.externalId!);
        state = "canceling";
      }
      if (state !== "ended") {
        const polled = await ctx.api.poll(pb.externalId!);
        const seen = { providerStatus: polled.status, counts: polled.counts };
        if (!(await this.update(pb.id, { ...seen, state: polled.ended ? "ended" : state }))) return;
        if (polled.ended) state = "ended";
      }
      if (state === "ended") return await this.settle(pb, ctx, { read: true });
    } catch (err) {
      failure = this.providerText(errorText(err));
      this.o.log.warn({ err, provider_batch_id: pb.id }, "the provider failed a cancelled batch's cancel, poll or results");
    }
    const graceSeconds = Math.max(CANCEL_GRACE_MIN_SECONDS, CANCEL_GRACE_POLLS * this.cfg.poll_seconds);
    if ((ctx.cancelledSeconds ?? 0) > graceSeconds) {
      await cancelRest(this.o.db, { owner: this.o.workerId, providerBatchId: pb.id });
      const why = `the provider did not end the cancelled batch within ${graceSeconds} s${failure ? ` (${failure})` : ""}; its requests were cancelled here`;
      await this.update(pb.id, { state: "settled", lastError: why, nextPollSeconds: 0 });
      this.counters.settled++;
      return;
    }
    await this.update(pb.id, { state, ...(failure ? { lastError: failure } : {}), nextPollSeconds: this.cfg.poll_seconds });
  }

  /**
   * Settles every result of an ended provider batch (`read`; else none: all end as missing), a
   * chunk at a time, then what had none: cancelled with a cancelled batch, else as expired. A line
   * that cannot be read is skipped and counted (its request has no result). The provider batch's
   * lease is renewed all along, however slowly the provider sends the file.
   */
  private async settle(pb: LeasedProviderBatch, ctx: Context, how: { read: boolean }): Promise<void> {
    const atProvider = new Set(await itemsAtProvider(this.o.db, pb.id));
    const settle = this.settler(ctx, pb.batchId);
    let unreadable = 0;
    const held = await this.keepingLease(pb.id, async (lost) => {
      if (!how.read) return true;
      let chunk: BatchResult[] = [];
      for await (const line of ctx.api.results(pb.externalId!) as AsyncIterable<ResultLine>) {
        if (this.stopped || lost()) return false;
        if (line.kind === "unreadable") {
          unreadable++;
          continue;
        }
        if (!atProvider.delete(line.customId)) continue; // settled already (a poller before us), cancelled, or not ours
        chunk.push(line);
        if (chunk.length >= SETTLE_CHUNK) {
          if (!(await this.settleChunk(pb, ctx, chunk, settle))) return false;
          chunk = [];
        }
      }
      return !(chunk.length && !(await this.settleChunk(pb, ctx, chunk, settle)));
    }).catch(async (err) => {
      // A cancelled batch's items end whatever the results do; any other batch reads them again at its next poll.
      if (ctx.status !== "cancelled") throw err;
      this.o.log.warn({ err, provider_batch_id: pb.id }, "reading a cancelled batch's results failed; cancelling the rest");
      return true;
    });
    if (!held) return;
    if (unreadable > 0) this.o.log.warn({ provider_batch_id: pb.id, unreadable }, "provider results lines could not be read; skipped");
    // Items the results did not name: cancelled with the batch, else as expired.
    if (atProvider.size > 0 && ctx.status !== "cancelled")
      await this.settleChunk(pb, ctx, [...atProvider].map((customId) => ({ customId, kind: "expired" as const })), settle);
    if (ctx.status === "cancelled") await cancelRest(this.o.db, { owner: this.o.workerId, providerBatchId: pb.id });
    const note = unreadable > 0 ? { lastError: `${unreadable} result line(s) could not be read and were skipped; their requests ended as ones without a result` } : {};
    await this.update(pb.id, { state: "settled", ...note, nextPollSeconds: 0 });
    this.counters.settled++;
  }

  /**
   * Runs `work` while renewing the provider batch's lease every third of it (a settle pass may
   * take longer than the lease: a large or slow results file); `lost` says the lease is gone.
   */
  private async keepingLease<T>(id: string, work: (lost: () => boolean) => Promise<T>): Promise<T> {
    let lost = false;
    let renewing: Promise<void> = Promise.resolve();
    const timer = setInterval(
      () => {
        renewing = this.update(id, {}).then(
          (held) => {
            if (!held) lost = true;
          },
          () => {},
        );
      },
      Math.max(50, (this.cfg.lease_seconds * 1000) / 3),
    );
    try {
      return await work(() => lost);
    } finally {
      clearInterval(timer);
      await renewing;
    }
  }

  /** One chunk of results: held under item leases, read, settled in one round trip; expired ones to the live lane. False: the lease is gone. */
  private async settleChunk(
    pb: LeasedProviderBatch,
    ctx: Context,
    results: BatchResult[],
    settle: (item: ClaimedItem, result: BatchResult) => Promise<Settlement | null>,
  ): Promise<boolean> {
    if (!(await this.update(pb.id, {}))) return false;
    const toLive = this.cfg.on_expiry === "live" && ctx.status !== "cancelled";
    const live = results.filter((r) => r.kind === "expired" && toLive).map((r) => r.customId);
    const rest = results.filter((r) => !(r.kind === "expired" && toLive) && !(r.kind === "cancelled" && ctx.status === "cancelled"));
    const lease = { owner: this.o.workerId, providerBatchId: pb.id, leaseSeconds: this.o.config.subagent_batches.lease_seconds };
    if (live.length) {
      const adopted = await holdItems(this.o.db, { ...lease, ids: live, live: true });
      this.counters.adopted += adopted.length;
      if (adopted.length) this.o.adopt(adopted, ctx.spec);
    }
    const held = await holdItems(this.o.db, { ...lease, ids: rest.map((r) => r.customId), live: false });
    const byId = new Map(rest.map((r) => [r.customId, r]));
    const settlements: Settlement[] = [];
    for (const item of held) {
      const s = await matchingAs(ctx.spec.caller.user_id, () => settle(item, byId.get(item.id)!));
      if (s) settlements.push(s);
    }
    await settleItems(this.o.db, { workerId: this.o.workerId, settlements, maxDeferrals: this.o.config.rate_limits.max_deferrals });
    return true;
  }

  /** How one held item's result settles: a live answer's settlement, priced at the batch discount. */
  private settler(ctx: Context, batchId: string): (item: ClaimedItem, result: BatchResult) => Promise<Settlement | null> {
    const { spec } = ctx;
    const b = this.o.config.subagent_batches;
    const limits = { maxResultChars: b.max_result_chars, previewMaxChars: b.result_preview_max_chars };
    const liveModel = this.liveModel(spec.model.name);
    const read = answerReader(ctx.entry, spec, liveModel?.model ?? unavailableModel(spec.model.name), lanePromptCache(ctx.entry, spec, batchId));
    const price = spec.prices[spec.model.name] ?? { input: 0, output: 0 };
    const prices = snapshotPrices(price);
    const priced = (u: Usage) => costUsd(prices, u);
    const discount = spec.batch_discount ?? price.batch_discount ?? 0.5;
    return async (item, result) => {
      const ref = { id: item.id, leaseToken: item.leaseToken };
      if (result.kind === "expired")
        return { ...ref, kind: "failed", retryable: false, error: "provider_batch_expired: the provider's batch window ended before this request ran" };
      if (result.kind !== "succeeded")
        return {
          ...ref,
          kind: "failed",
          error: result.kind === "errored" ? `provider_batch_error: ${this.providerText(result.error)}` : "provider_batch_cancelled: the provider cancelled this request",
        };
      const prompt = withExamples(spec, item.itemKey, item.feedback ? withFeedback(item.prompt, item.feedback) : item.prompt);
      const a = await read({ prompt, body: result.body, signal: this.controller.signal });
      const out: ItemRunResult = {
        status: a.status,
        text: a.text,
        usage: { ...a.usage },
        model: spec.model.name,
        stopReason: a.stopReason,
        ...(a.error ? { error: a.error } : {}),
        ...(a.errorClass ? { errorClass: a.errorClass as ItemRunResult["errorClass"] } : {}),
        ...(a.output !== undefined ? { output: a.output } : {}),
      };
      // As the live lane refuses it: counts out of range are not billed, and the answer with them is not kept.
      if (a.usage.outOfRange) {
        this.o.log.warn({ usage: out.usage, item_id: item.id }, "a provider batch result reported token counts out of range; its answer is refused");
        Object.assign(out, { status: "failed", text: "", stopReason: "invalid_usage", error: INVALID_USAGE_ERROR, errorClass: "invalid_usage" });
        delete out.output;
      }
      if (out.status === "completed" && spec.checks.length > 0 && liveModel)
        await checkAnswer(out, {
          item,
          spec,
          signal: this.controller.signal,
          model: liveModel,
          answer: { text: out.text, output: out.output, model: spec.model.name, stopReason: a.stopReason },
          runtime: this.o.runtime,
          fallback: this.o.model,
        });
      // Everything at full price (the checks priced judges already), less the discount on the batch's own response.
      const full = out.usage.costUsd ?? priced(out.usage);
      out.usage = { ...out.usage, costUsd: full - priced(a.batchUsage) * (1 - discount) };
      return settlementOf(ref, out, limits);
    };
  }

  private liveModel(name: string): ResolvedModel | undefined {
    if (this.o.model?.catalogName === name) return this.o.model;
    try {
      return resolveModelByName(this.o.config, name);
    } catch {
      return undefined;
    }
  }
}

/** A live call this worker cannot make (the batch's model is not in its catalog). */
function unavailableModel(name: string): LanguageModelV3 {
  const refuse = () => Promise.reject(new Error(`model_unavailable: "${name}" is not in this worker's catalog`));
  return { specificationVersion: "v3", provider: "unavailable", modelId: name, supportedUrls: {}, doGenerate: refuse, doStream: refuse };
}
