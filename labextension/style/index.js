import './base.css';
import './gpus.css';
import './submit.css';
