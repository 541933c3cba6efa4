"use client";

import Link from "next/link";
import { useRouter } from "next/navigation";
import { signIn } from "next-auth/react";
import { useState } from "react";
import { Button } from "@/components/ui/button";
import { Field } from "@/components/ui/field";
import { Spinner } from "@/components/ui/spinner";

/** Mirrors server/auth/options.ts RATE_LIMITED_PREFIX (that module is server-only). */
const RATE_LIMITED_PREFIX = "rate_limited:";

const LOCKED: Record<string, (when: string) => string> = {
  address: (when) => `Too many failed sign-ins from your network. Try again ${when}.`,
  email: (when) =>
    `Too many failed sign-ins for this account. Networks that signed in to it in the last 30 days still can; from here, try again ${when}.`,
  email_here: (when) => `Too many failed sign-ins for this account from here. Try again ${when}.`,
};

/** The form's words for `rate_limited:<scope>:<ISO time>` (server/auth/options.ts). */
function lockedMessage(error: string): string | null {
  if (!error.startsWith(RATE_LIMITED_PREFIX)) return null;
  const rest = error.slice(RATE_LIMITED_PREFIX.length);
  const scope = rest.slice(0, rest.indexOf(":"));
  const at = new Date(rest.slice(scope.length + 1));
  const say = LOCKED[scope] ?? LOCKED.email;
  if (Number.isNaN(at.getTime())) return say("later");
  const minutes = Math.max(1, Math.ceil((at.getTime() - Date.now()) / 60_000));
  const time = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return say(`at ${time} (in ${minutes} minute${minutes === 1 ? "" : "s"})`);
}

export function SignInForm({ callbackUrl, firstVisit = false }: { callbackUrl: string; firstVisit?: boolean }) {
  const router = useRouter();
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);

  async function onSubmit(e: React.FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const email = String(form.get("email") ?? "").trim();
    const password = String(form.get("password") ?? "");
    // Say what is missing instead of sending an empty form and answering "wrong password".
    const missing = [!email && "your email", !password && "your password"].filter(Boolean);
    if (missing.length) {
      setError(`Enter ${missing.join(" and ")}.`);
      return;
    }
    setPending(true);
    setError(null);
    // A busy server answers 429 with a JSON error instead of next-auth's answer: signIn throws.
    const res = await signIn("credentials", { email, password, redirect: false }).catch(() => "busy" as const);
    if (res === "busy") {
      setPending(false);
      setError("The server is busy checking other sign-ins (or could not be reached). Try again in a few seconds.");
      return;
    }
    if (!res || res.error) {
      setPending(false);
      setError((res?.error && lockedMessage(res.error)) || "Wrong email or password.");
      return;
    }
    router.replace(callbackUrl);
    router.refresh();
  }

  return (
    <form onSubmit={onSubmit} className="space-y-4" noValidate>
      <h1 className="text-lg font-semibold">Sign in</h1>
      {firstVisit ? (
        <div data-testid="first-account-hint" role="note" className="space-y-1.5 rounded-lg bg-sky-50 px-3 py-2 text-sm text-sky-950 ring-1 ring-sky-200 ring-inset">
          <p className="font-medium">No account exists yet.</p>
          <p>
            Create the first one (the admin) with the <strong>Setup link</strong> the server printed when it started: a line{" "}
            <code className="font-mono text-xs wrap-anywhere">Setup: http://…/register?setup=…</code> in the <code className="font-mono text-xs">npm start</code>{" "}
            output. Scrolled away? Run <code className="font-mono text-xs wrap-anywhere">npm run --silent cli -- setup-code</code> to print the code
            again, then{" "}
            <Link href="/register" className="font-medium underline underline-offset-2">
              create the first account
            </Link>{" "}
            with it.
          </p>
        </div>
      ) : null}
      <Field label="Email" id="email" name="email" type="email" autoComplete="email" required autoFocus />
      <Field label="Password" id="password" name="password" type="password" autoComplete="current-password" required />
      {error && (
        <p role="alert" className="rounded-lg bg-red-50 px-3 py-2 text-sm text-red-700">
          {error}
        </p>
      )}
      <Button type="submit" className="w-full" disabled={pending}>
        {pending && <Spinner />}
        Sign in
      </Button>
      <p className="text-center text-sm text-zinc-500">
        No account yet?{" "}
        <Link href="/register" className="font-medium text-zinc-900 underline-offset-4 hover:underline">
          Create one
        </Link>
      </p>
    </form>
  );
}
