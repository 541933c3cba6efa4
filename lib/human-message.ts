/**
 * The API names the field first ("name: must not be empty"); a person reads a sentence with
 * the field's label: "Token name must not be empty." Messages without a field pass through.
 */
export function humanMessage(message: string, labels: Readonly<Record<string, string>>): string {
  const match = /^([A-Za-z_.\d]+): (.+)$/.exec(message);
  if (!match) return message;
  const label = labels[match[1]] ?? match[1].replaceAll("_", " ");
  const text = `${label} ${match[2]}`.replace(/[.\s]+$/, "");
  return `${text[0].toUpperCase()}${text.slice(1)}.`;
}
