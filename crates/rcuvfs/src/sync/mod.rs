//! Synchronization primitives of rcuvfs, written by hand because they are the
//! product: the lock-free techniques the seeds describe.
//!
//! - [`atomic`]: the one facade for atomics, cells, spinning and parking. Every
//!   primitive below uses it, so that under `--cfg loom` each runs on loom's
//!   model checker unchanged (the pattern of tokio's `loom` module).
//! - [`mutex`]: a word-sized lock that spins briefly, then parks.
//! - [`lockref`]: a reference count and a lock in one 64-bit word
//!   (Linux `lib/lockref.c`, seed 000).
//! - [`seqcount`]: sequence counts and sequence locks whose readers fall back
//!   to the lock instead of spinning on a preempted writer.
//! - [`audit`]: counts of shared writes per operation (feature `audit`).
//! - [`list_batch`]: the superblock inode list, locked, batched (seed 004)
//!   or per CPU.
//! - [`rcu`]: the RCU facade (read_lock, call_rcu, synchronize) over the
//!   `seize` reclamation crate, with a loom-visible stand-in.
//! - [`chunk_map`]: numbers handed out a chunk at a time to what they number
//!   (memfs's inode table): an insert is one store, a lookup two loads.
//! - [`index`]: the resizable hash index that RCU readers walk with no lock
//!   and no store (the dcache's per-directory children, memfs's directories,
//!   the in-core inodes of a filesystem that keeps its own).
//! - [`shard`]: per-thread shards (per-CPU data's stand-in), a sharded
//!   counter (`percpu_counter`) and a sharded budget (per-CPU reserves).
//! - [`percpu_ref`]: a reference count taken and dropped per shard until
//!   its owner kills it (`percpu_ref`).
//! - [`reclaim`]: the thread that frees what idle threads leave behind.

pub mod atomic;
pub mod audit;
pub mod chunk_map;
pub mod index;
pub mod list_batch;
pub mod lockref;
pub mod mutex;
pub mod percpu_ref;
pub mod rcu;
pub mod reclaim;
pub mod seqcount;
pub mod shard;

pub use lockref::{Lockref, LockrefGuard};
pub use mutex::{Mutex, MutexGuard, RawMutex};
pub use rcu::{Rcu, RcuGuard, RcuHold};
pub use seqcount::{SeqCount, SeqLock};
