"use client";

import Link from "next/link";
import { useRouter } from "next/navigation";
import { signIn } from "next-auth/react";
import { useState } from "react";
import { ApiError, request } from "@/lib/api/client";
import { humanMessage } from "@/lib/human-message";
import { Button } from "@/components/ui/button";
import { Field } from "@/components/ui/field";
import { Spinner } from "@/components/ui/spinner";

const MIN_PASSWORD = 8;

import type { RegistrationMode } from "@/server/auth/registration";

const INTRO: Record<RegistrationMode, string> = {
  first:
    "You are the first person here: this account becomes the admin, who invites everyone else. The setup code comes from the Setup link the server printed when it started.",
  open: "Anyone may create an account on this deployment.",
  invite: "This deployment is invite-only: paste the invite code the admin gave you.",
  closed: "",
};

/** A link to sign-in, shared by the form and the closed notice. */
function SignInLink() {
  return (
    <p className="text-center text-sm text-zinc-500">
      Already have an account?{" "}
      <Link href="/signin" className="font-medium text-zinc-900 underline-offset-4 hover:underline">
        Sign in
      </Link>
    </p>
  );
}

export function RegisterForm({
  mode,
  initialInvite,
  initialSetup,
}: {
  mode: RegistrationMode;
  initialInvite: string;
  initialSetup: string;
}) {
  const router = useRouter();
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);

  async function onSubmit(e: React.FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const email = String(form.get("email") ?? "");
    const password = String(form.get("password") ?? "");
    const inviteCode = String(form.get("invite_code") ?? "").trim();
    const setupCode = String(form.get("setup_code") ?? "").trim();
    setError(null);
    if (mode === "first" && !setupCode) {
      setError("Enter the setup code: it is in the Setup link the server printed when it started.");
      return;
    }
    if (mode === "invite" && !inviteCode) {
      setError("Enter your invite code.");
      return;
    }
    if (password.length < MIN_PASSWORD) {
      setError(`Use at least ${MIN_PASSWORD} characters for the password.`);
      return;
    }
    setPending(true);
    try {
      await request("/api/register", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          email,
          password,
          ...(inviteCode && { invite_code: inviteCode }),
          ...(setupCode && { setup_code: setupCode }),
        }),
      });
    } catch (err) {
      setPending(false);
      const status = err instanceof ApiError ? err.status : 0;
      setError(
        status === 409
          ? "An account with this email already exists."
          : status === 403 && mode === "invite"
            ? "That invite code is not valid: it may be mistyped, used already or expired. Ask the admin for a new one."
            : status === 403 && mode === "first"
              ? "That setup code is not right. Copy the whole Setup link from the server's terminal, or run npm run --silent cli -- setup-code."
              : humanMessage((err as Error).message, {
                  email: "Email",
                  password: "Password",
                  invite_code: "Invite code",
                  setup_code: "Setup code",
                }),
      );
      return;
    }
    // Sign the new user in right away.
    const signed = await signIn("credentials", { email, password, redirect: false });
    if (!signed || signed.error) {
      router.replace("/signin");
      return;
    }
    router.replace("/");
    router.refresh();
  }

  if (mode === "closed") {
    return (
      <div className="space-y-4">
        <h1 className="text-lg font-semibold">Registration is closed</h1>
        <p className="text-sm text-zinc-600">
          New accounts on this deployment are created by its operator. Ask them for one, then sign in.
        </p>
        <SignInLink />
      </div>
    );
  }

  return (
    <form onSubmit={onSubmit} className="space-y-4" noValidate>
      <h1 className="text-lg font-semibold">Create your account</h1>
      <p className="text-sm text-zinc-600">
        {initialInvite && mode !== "first" ? "You were invited: your invite code is filled in below." : INTRO[mode]}
      </p>
      {mode === "first" && (
        <Field
          label="Setup code"
          id="setup_code"
          name="setup_code"
          autoComplete="off"
          spellCheck={false}
          required
          defaultValue={initialSetup}
          placeholder="setup_…"
        />
      )}
      {(mode === "invite" || initialInvite !== "") && (
        <Field
          label="Invite code"
          id="invite_code"
          name="invite_code"
          autoComplete="off"
          spellCheck={false}
          required={mode === "invite"}
          defaultValue={initialInvite}
          placeholder="inv_…"
        />
      )}
      <Field label="Email" id="email" name="email" type="email" autoComplete="email" required autoFocus />
      <Field
        label="Password"
        id="password"
        name="password"
        type="password"
        autoComplete="new-password"
        minLength={MIN_PASSWORD}
        required
        placeholder={`At least ${MIN_PASSWORD} characters`}
      />
      {error && (
        <p role="alert" className="rounded-lg bg-red-50 px-3 py-2 text-sm text-red-700">
          {error}
        </p>
      )}
      <Button type="submit" className="w-full" disabled={pending}>
        {pending && <Spinner />}
        Create account
      </Button>
      <SignInLink />
    </form>
  );
}
