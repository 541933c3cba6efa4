import type { ReactNode } from "react";
import { buttonClasses } from "./button";

/** A file the browser saves (results, compare.csv, a golden set's items): a small secondary button with the download arrow. */
export function DownloadLink({ href, fileName, className = "", children }: { href: string; fileName?: string; className?: string; children: ReactNode }) {
  return (
    <a href={href} download={fileName ?? true} className={buttonClasses("secondary", "sm", className)}>
      <svg aria-hidden viewBox="0 0 16 16" className="size-3.5">
        <path d="M8 2v8m0 0L5 7m3 3l3-3M3 13h10" fill="none" stroke="currentColor" strokeWidth="1.5" />
      </svg>
      {children}
    </a>
  );
}
