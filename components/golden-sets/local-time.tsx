"use client";

import { formatTime } from "@/lib/format";

/** A moment in the browser's time zone (the server's rendering, in its own zone, is replaced on hydration). */
export function LocalTime({ iso }: { iso: string }) {
  return (
    <time dateTime={iso} title={iso} suppressHydrationWarning>
      {formatTime(iso)}
    </time>
  );
}
