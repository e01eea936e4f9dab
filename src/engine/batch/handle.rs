//! A [`Batcher`] on its own thread: the one owner of the model, fed by a channel. Handles are cheap
//! clones that many threads call at once; each call blocks until its request is done.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::{BatchOptions, Batcher, Completion, Request, SeqId};
use crate::engine::error::{EngineError, Result};
use crate::engine::generate::Generator;

struct Job {
    request: Request,
    reply: mpsc::Sender<Completion>,
}

/// A cloneable handle to a batching engine thread. The thread ends when the last handle is
/// dropped and no request is left.
#[derive(Clone)]
pub struct EngineHandle {
    jobs: mpsc::Sender<Job>,
}

/// The engine thread's join handle, to wait for it after the last [`EngineHandle`] is gone.
pub struct EngineThread(JoinHandle<Batcher>);

impl EngineThread {
    /// Waits for the thread and returns its batcher (with the model and the prefix cache).
    pub fn join(self) -> Result<Batcher> {
        self.0
            .join()
            .map_err(|_| EngineError::EngineStopped("the engine thread panicked".into()))
    }
}

impl EngineHandle {
    /// Starts the engine thread over `generator`.
    pub fn spawn(generator: Generator, options: BatchOptions) -> Result<(Self, EngineThread)> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("tableseek-engine".into())
            .spawn(move || serve(Batcher::new(generator, options), inbox))
            .map_err(|err| EngineError::EngineStopped(format!("cannot start its thread: {err}")))?;
        Ok((Self { jobs }, EngineThread(worker)))
    }

    /// Runs `request` with whatever else is running, and waits for it.
    pub fn generate(&self, request: Request) -> Result<Completion> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .send(Job { request, reply })
            .map_err(|_| EngineError::EngineStopped("it no longer takes requests".into()))?;
        answer
            .recv()
            .map_err(|_| EngineError::EngineStopped("it dropped a request".into()))
    }
}

fn serve(mut batcher: Batcher, inbox: mpsc::Receiver<Job>) -> Batcher {
    let mut replies: HashMap<SeqId, mpsc::Sender<Completion>> = HashMap::new();
    let mut open = true;
    loop {
        if batcher.is_idle() {
            if !open {
                break;
            }
            // Nothing to run: block until a request arrives or every handle is gone.
            match inbox.recv() {
                Ok(job) => {
                    replies.insert(batcher.submit(job.request), job.reply);
                }
                Err(_) => break,
            }
        }
        // Requests that arrived meanwhile join at this step.
        loop {
            match inbox.try_recv() {
                Ok(job) => {
                    replies.insert(batcher.submit(job.request), job.reply);
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        for completion in batcher.step() {
            if let Some(reply) = replies.remove(&completion.id) {
                // A caller that stopped waiting is no error of the engine's.
                let _ = reply.send(completion);
            }
        }
    }
    batcher
}
