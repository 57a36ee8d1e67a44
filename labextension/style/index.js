import './base.css';
import './gpus.css';
