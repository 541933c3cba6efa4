import type { ReactNode } from "react";

/** One titled block of the Settings page; every section (sessions, tokens, invites, webhooks…) uses it. */
export function SettingsSection({ id, title, description, children }: { id: string; title: string; description: string; children: ReactNode }) {
  return (
    <section aria-labelledby={`${id}-title`} className="rounded-xl border border-zinc-200 bg-white p-5 shadow-xs">
      <h2 id={`${id}-title`} className="text-base font-semibold">
        {title}
      </h2>
      <p className="mt-1 text-sm text-zinc-500">{description}</p>
      <div className="mt-4">{children}</div>
    </section>
  );
}

export function When({ iso }: { iso: string | null }) {
  if (!iso) return <span className="text-zinc-400">never</span>;
  return (
    <time dateTime={iso} title={iso}>
      {new Date(iso).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short", timeZone: "UTC" })} UTC
    </time>
  );
}
