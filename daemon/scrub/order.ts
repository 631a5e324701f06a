// Detections mostly come in the order they are wanted (the detectors read the text from its start), and sorting even
// a list of three makes the sort's own working arrays: on every call, twice per text.

/** Whether `list` is already in `compare`'s order (then a stable sort would leave it as it is). */
export function inOrder<T>(list: readonly T[], compare: (a: T, b: T) => number): boolean {
  for (let i = 1; i < list.length; i++) if (compare(list[i - 1]!, list[i]!) > 0) return false;
  return true;
}

/** `list` sorted in place by `compare`, unless it is in that order already. */
export function sortInPlace<T>(list: T[], compare: (a: T, b: T) => number): T[] {
  return inOrder(list, compare) ? list : list.sort(compare);
}
