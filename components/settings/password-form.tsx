"use client";

import { useRouter } from "next/navigation";
import { useState } from "react";
import { Button } from "@/components/ui/button";
import { Field } from "@/components/ui/field";
import { passwordChangedSchema } from "@/lib/api/auth";
import { sendJson } from "@/lib/api/client";
import { humanMessage } from "@/lib/human-message";

const FIELD_LABELS = { current_password: "Current password", new_password: "New password" };

type Outcome = { ok: true; message: string } | { ok: false; message: string } | null;

/**
 * Password change through POST /api/account/password. The server checks the current password
 * and the rules for the new one; the confirmation is only checked here. Every other browser
 * is signed out, this one stays; the sessions list above is refreshed to show it.
 */
export function PasswordForm() {
  const router = useRouter();
  const [outcome, setOutcome] = useState<Outcome>(null);
  const [pending, setPending] = useState(false);

  async function onSubmit(e: React.FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const formEl = e.currentTarget;
    const form = new FormData(formEl);
    const current = String(form.get("current_password") ?? "");
    const next = String(form.get("new_password") ?? "");
    if (!current) return setOutcome({ ok: false, message: "Enter your current password." });
    if (next !== String(form.get("confirm_password") ?? "")) return setOutcome({ ok: false, message: "The new password and its confirmation do not match." });
    setOutcome(null);
    setPending(true);
    try {
      const { other_sessions_ended: ended } = await sendJson(passwordChangedSchema, "/api/account/password", "answer", {
        current_password: current,
        new_password: next,
      });
      formEl.reset();
      const others = ended === 0 ? "No other browser was signed in" : ended === 1 ? "1 other browser was signed out" : `${ended} other browsers were signed out`;
      setOutcome({ ok: true, message: `Password changed. ${others}; API tokens keep working.` });
      router.refresh();
    } catch (err) {
      setOutcome({ ok: false, message: humanMessage((err as Error).message, FIELD_LABELS) });
    } finally {
      setPending(false);
    }
  }

  return (
    <form onSubmit={onSubmit} className="grid gap-3 sm:grid-cols-3 sm:items-end" noValidate>
      <Field label="Current password" id="current-password" name="current_password" type="password" autoComplete="current-password" required />
      <Field label="New password" id="new-password" name="new_password" type="password" autoComplete="new-password" minLength={8} required />
      <Field label="Confirm new password" id="confirm-password" name="confirm_password" type="password" autoComplete="new-password" required />
      <div className="sm:col-span-3">
        <Button type="submit" disabled={pending}>
          Change password
        </Button>
      </div>
      {outcome && (
        <p
          role={outcome.ok ? "status" : "alert"}
          className={`rounded-lg px-3 py-2 text-sm sm:col-span-3 ${outcome.ok ? "bg-emerald-50 text-emerald-800" : "bg-red-50 text-red-700"}`}
        >
          {outcome.message}
        </p>
      )}
    </form>
  );
}
