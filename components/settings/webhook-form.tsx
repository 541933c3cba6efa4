"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import { z } from "zod";
import { buttonClasses } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import { humanMessage } from "@/lib/human-message";
import { OnceSecret } from "@/components/settings/once-secret";
import { webhookSchema, webhookWithSecretSchema } from "@/lib/api/batches";
import { fetchJson, sendJson } from "@/lib/api/client";

/**
 * The user's batch webhook: Flotilla POSTs a JSON event to this URL when one of their batches
 * completes, fails, is cancelled or pauses, signed per Standard Webhooks with the secret (shown
 * once, right after saving). A secret from before Standard Webhooks gets a prompt to replace it.
 */

const KEY = ["webhook"] as const;

const URL_PATH = "/api/webhook";
const currentSchema = z.object({ webhook: webhookSchema.nullable() });
const savedSchema = z.object({ webhook: webhookWithSecretSchema });
const removedSchema = z.object({ webhook: z.null() });

export function WebhookForm() {
  const qc = useQueryClient();
  const id = useId();
  const current = useQuery({ queryKey: KEY, queryFn: ({ signal }) => fetchJson(currentSchema, URL_PATH, "webhook", { signal }) });
  const [url, setUrl] = useState("");
  const [secret, setSecret] = useState<string | null>(null);
  // Saving a URL (or the current one again, for a new secret) always issues a new secret.
  const save = useMutation({
    mutationFn: (target: string) => sendJson(savedSchema, URL_PATH, "webhook", { url: target }, { method: "PUT" }),
    onSuccess: ({ webhook }) => {
      const { secret: issued, ...shown } = webhook;
      setSecret(issued);
      setUrl("");
      qc.setQueryData(KEY, { webhook: shown });
    },
  });
  const remove = useMutation({
    mutationFn: () => fetchJson(removedSchema, URL_PATH, "webhook", { method: "DELETE" }),
    onSuccess: () => {
      setSecret(null);
      qc.setQueryData(KEY, { webhook: null });
    },
  });
  const hook = current.data?.webhook ?? null;
  const error = save.error ?? remove.error;

  return (
    <section aria-labelledby={`${id}-title`} data-testid="webhook-form" className="flex flex-col gap-3 rounded-xl border border-zinc-200 bg-white p-5 text-sm shadow-xs">
      <div>
        <h2 id={`${id}-title`} className="text-base font-semibold">
          Batch webhook
        </h2>
        <p className="mt-1 text-zinc-600">
          When one of your batches completes, fails, is cancelled or pauses, Flotilla POSTs a JSON event (
          <code className="rounded bg-zinc-100 px-1">batch.completed</code>, <code className="rounded bg-zinc-100 px-1">batch.failed</code>,{" "}
          <code className="rounded bg-zinc-100 px-1">batch.cancelled</code>, <code className="rounded bg-zinc-100 px-1">batch.paused</code>) to
          this URL, signed per{" "}
          <a className="text-sky-700 underline" href="https://www.standardwebhooks.com/" target="_blank" rel="noreferrer">
            Standard Webhooks
          </a>
          : verify it with the <code className="rounded bg-zinc-100 px-1">standardwebhooks</code> package and the secret. The URL must be
          https to a public address. Failed deliveries are retried with backoff.
        </p>
      </div>
      <p data-testid="webhook-current" className="text-zinc-700">
        {current.isPending ? "Loading…" : hook ? (
          <>
            Sending to <span className="break-all font-mono text-zinc-900">{hook.url}</span>
          </>
        ) : (
          "No webhook set."
        )}
      </p>
      {hook?.legacy_secret && !secret ? (
        <div role="status" data-testid="webhook-legacy" className="flex flex-wrap items-center gap-2 rounded-md border border-amber-300 bg-amber-50 px-3 py-2 text-amber-900">
          <p className="min-w-0 flex-1">
            This webhook's secret predates Standard Webhooks signatures: its deliveries still carry the old{" "}
            <code className="rounded bg-amber-100 px-1">X-Flotilla-Signature</code> header, which a captured delivery can replay. Take a new
            secret and verify with <code className="rounded bg-amber-100 px-1">standardwebhooks</code>.
          </p>
          <button type="button" disabled={save.isPending} onClick={() => save.mutate(hook.url)} className={buttonClasses("secondary", "sm")}>
            New secret
          </button>
        </div>
      ) : null}
      {secret ? (
        <OnceSecret label="Signing secret" value={secret} title="Signing secret: copy it now, it is not shown again." className="" />
      ) : null}
      <form
        className="flex flex-wrap items-end gap-2"
        onSubmit={(e) => {
          e.preventDefault();
          save.mutate(url.trim());
        }}
      >
        <label htmlFor={`${id}-url`} className="flex min-w-0 flex-1 flex-col gap-1">
          <span className="text-xs font-medium text-zinc-700">{hook ? "New URL" : "URL"} (https, public address)</span>
          <input
            id={`${id}-url`}
            type="url"
            required
            value={url}
            onChange={(e) => setUrl(e.target.value)}
            placeholder="https://example.com/flotilla-hook"
            className="w-full rounded-md border border-zinc-300 px-2 py-1.5 text-sm focus-visible:outline-2 focus-visible:outline-sky-600"
          />
        </label>
        <button type="submit" disabled={save.isPending || url.trim() === ""} className={buttonClasses("secondary", "sm")}>
          {save.isPending ? <Spinner /> : null}
          {hook ? "Replace" : "Save"}
        </button>
        {hook ? (
          <button type="button" disabled={remove.isPending} onClick={() => remove.mutate()} className={buttonClasses("danger", "sm")}>
            Remove
          </button>
        ) : null}
      </form>
      {error ? (
        <p role="alert" className="text-red-700">
          {humanMessage(error.message, { url: "The URL" })}
        </p>
      ) : null}
    </section>
  );
}
