import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { RegisterForm } from "./register-form";

export const metadata: Metadata = { title: "Create account · Flotilla" };
export const dynamic = "force-dynamic";

export default async function RegisterPage() {
  if (await currentUser()) redirect("/");
  return <RegisterForm />;
}
