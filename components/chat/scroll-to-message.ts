/** How long a link waits for its message to reach the transcript. */
const WAIT_MS = 30_000;

/**
 * Scrolls the transcript to a message (`#message-<id>`), at once or as soon as it is rendered:
 * a background task's card can learn its report's id a moment before the chat shows the report.
 */
export function scrollToMessage(messageId: string): void {
  const id = `message-${messageId}`;
  window.history.replaceState(window.history.state, "", `#${id}`);
  const go = (el: HTMLElement) => el.scrollIntoView({ behavior: "smooth", block: "start" });
  const now = document.getElementById(id);
  if (now) {
    go(now);
    return;
  }
  const observer = new MutationObserver(() => {
    const el = document.getElementById(id);
    if (!el) return;
    stop();
    go(el);
  });
  const timer = setTimeout(() => stop(), WAIT_MS);
  const stop = () => {
    observer.disconnect();
    clearTimeout(timer);
  };
  observer.observe(document.body, { childList: true, subtree: true });
}
