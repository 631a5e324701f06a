// The device's own ceiling: past `max` concurrent calls, new ones are refused with 503 and Retry-After instead of
// queueing without bound.
export class InFlightGate {
  private count = 0;

  constructor(private readonly max: number) {}

  tryEnter(): boolean {
    if (this.count >= this.max) return false;
    this.count++;
    return true;
  }

  leave(): void {
    if (this.count > 0) this.count--;
  }

  get current(): number {
    return this.count;
  }
}
