// The entries the journal has on disk that lmdb does not hold readable yet, by leaf index, for the short while
// between: a client that asks for its entry right after its response gets it. A ring of slots rewritten in place,
// not a Map (nor is the tree's right edge in log.ts). Every entry passes through here: a Map's table is rebuilt again
// and again as keys come and go, and a replaced table that has reached the old generation still holds what it held,
// which young collections cannot tell from live, so entries and tables pile up there for a full collection. Slots
// rewritten in place promote far less and keep young collections short.

/** Slots a ring starts with, and shrinks back to once it is empty. */
const SLOTS = 256;

export class AcknowledgedEntries {
  /** Slot `index % length` holds entry `index` for every index in [from, to) that was added, and nothing else. */
  private slots: Array<Buffer | undefined> = new Array<Buffer | undefined>(SLOTS).fill(undefined);
  private from = 0;
  private to = 0;

  /**
   * Holds entry `index`. The journal acknowledges in index order, so each index comes past the ones before; one that
   * did not would still be held if lmdb does not have it yet (at or past `from`), and is left to lmdb otherwise.
   */
  add(index: number, bytes: Buffer): void {
    if (index < this.from) return;
    if (index - this.from >= this.slots.length) this.grow(index - this.from + 1);
    this.slots[index % this.slots.length] = bytes;
    if (index >= this.to) this.to = index + 1;
  }

  get(index: number): Buffer | undefined {
    return index >= this.from && index < this.to ? this.slots[index % this.slots.length] : undefined;
  }

  /** Lets go of every entry below `size` (lmdb has them readable now). */
  dropBelow(size: number): void {
    if (size <= this.from) return;
    const end = Math.min(size, this.to);
    for (let index = this.from; index < end; index++) this.slots[index % this.slots.length] = undefined;
    this.from = size;
    if (this.to < size) this.to = size;
    // A ring grown while lmdb fell behind goes back to its first size once it has caught up.
    if (this.from === this.to && this.slots.length > SLOTS) this.slots = new Array<Buffer | undefined>(SLOTS).fill(undefined);
  }

  /** Room for `span` entries from the lowest held: a new ring, rare (lmdb would have to fall seconds behind). */
  private grow(span: number): void {
    let length = this.slots.length * 2;
    while (length < span) length *= 2;
    const slots = new Array<Buffer | undefined>(length).fill(undefined);
    for (let index = this.from; index < this.to; index++) slots[index % length] = this.slots[index % this.slots.length];
    this.slots = slots;
  }
}
