import type { ButtonHTMLAttributes } from "react";

/**
 * The one button style of the app, for buttons and for links that act like buttons
 * (`buttonClasses`): a variant for what it does, a size for where it sits (xs inside a table
 * row or a list, sm in panels and dialogs, md in forms).
 */

type Variant = "primary" | "secondary" | "ghost" | "danger" | "dangerSolid";

const VARIANTS: Record<Variant, string> = {
  primary: "bg-zinc-900 text-white hover:bg-zinc-700 disabled:bg-zinc-300 disabled:text-zinc-500",
  secondary: "border border-zinc-300 bg-white text-zinc-800 hover:bg-zinc-50 disabled:text-zinc-400 disabled:hover:bg-white",
  ghost: "text-zinc-600 hover:bg-zinc-100 hover:text-zinc-900 disabled:text-zinc-300",
  danger: "border border-red-200 bg-white text-red-700 hover:bg-red-50 disabled:text-red-300 disabled:hover:bg-white",
  dangerSolid: "bg-red-700 text-white hover:bg-red-800 disabled:bg-red-300",
};

const SIZES = { xs: "h-6 gap-1 rounded-md px-2 text-xs", sm: "h-8 gap-1.5 rounded-lg px-3 text-sm", md: "h-10 gap-2 rounded-lg px-4 text-sm" } as const;

export type ButtonSize = keyof typeof SIZES;

export function buttonClasses(variant: Variant = "primary", size: ButtonSize = "md", extra = ""): string {
  return `inline-flex shrink-0 items-center justify-center font-medium transition-colors focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-zinc-900 disabled:cursor-not-allowed ${VARIANTS[variant]} ${SIZES[size]} ${extra}`;
}

export function Button({
  variant = "primary",
  size = "md",
  className = "",
  type = "button",
  ...props
}: ButtonHTMLAttributes<HTMLButtonElement> & { variant?: Variant; size?: ButtonSize }) {
  return <button type={type} className={buttonClasses(variant, size, className)} {...props} />;
}
