"use client";

import { type RefObject, useEffect } from "react";

/**
 * Closes a popup (a menu, a drawer) the way people expect: Escape, or a press anywhere outside
 * the given elements (the popup and the button that opened it). Without `inside` only Escape:
 * a modal drawer's backdrop takes the outside click itself, so it cannot fall through.
 */
export function useDismiss(open: boolean, close: () => void, inside?: readonly RefObject<HTMLElement | null>[]): void {
  useEffect(() => {
    if (!open) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape") close();
    };
    const onPointer = (e: PointerEvent) => {
      const target = e.target as Node;
      if (inside && !inside.some((ref) => ref.current?.contains(target))) close();
    };
    document.addEventListener("keydown", onKey);
    if (inside) document.addEventListener("pointerdown", onPointer);
    return () => {
      document.removeEventListener("keydown", onKey);
      document.removeEventListener("pointerdown", onPointer);
    };
  }, [open, close, inside]);
}
