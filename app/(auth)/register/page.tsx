import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { registrationMode } from "@/server/auth/registration";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { RegisterForm } from "./register-form";

export const metadata: Metadata = { title: "Create account · Flotilla" };
export const dynamic = "force-dynamic";

export default async function RegisterPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  if (await currentUser()) redirect("/");
  const mode = await registrationMode(getDatabase(), getConfig().auth.registration);
  const { invite, setup } = await searchParams;
  const param = (v: string | string[] | undefined) => (typeof v === "string" ? v.slice(0, 200) : "");
  return <RegisterForm mode={mode} initialInvite={param(invite)} initialSetup={param(setup)} />;
}
